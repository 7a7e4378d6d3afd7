"""``xinfer-bench transport``: what the ROS path adds to request-to-chunk latency.

Side by side in one run, for each robot count: closed-loop robots (Eq. 1) drive the
same emulated engine (a) in process, calling ``StageEngine.submit`` directly, and (b)
through ROS: an ``inference_server`` process on loopback, with every robot streaming
three cameras (the model's 224x352 / 224x320 / 224x320 rgb8) and joint states, and
sending PolicyRequests. The difference of the medians (and of the P99s) is the
transport overhead: serialization, DDS on loopback, observation assembly and image
conversion. The emulated backend keeps model time identical in both arms.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import tempfile
from pathlib import Path
from typing import TypedDict

from xinfer_ros.engine.latency_arms import in_process_latencies, percentiles
from xinfer_ros.serving.params import EXECUTOR_PARAM, EXECUTORS

__all__ = ["add_arguments", "run"]


class _Row(TypedDict):
    """One robot count: both arms' latency percentiles and what ROS adds (ms)."""

    robots: int
    # percentiles(): n, p50_ms, p99_ms.
    in_process: dict[str, float]
    ros: dict[str, float]
    added_p50_ms: float
    added_p99_ms: float


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the transport benchmark's flags."""
    parser.add_argument("--robots", type=int, nargs="+", default=[1, 4, 8])
    parser.add_argument("--duration", type=float, default=15.0, help="seconds per arm")
    parser.add_argument("--warmup", type=float, default=3.0, help="unmeasured seconds")
    parser.add_argument("--camera-rate", type=float, default=10.0, help="frames/s per camera")
    parser.add_argument("--executor", choices=EXECUTORS, default=EXECUTOR_PARAM.default,
                        help="rclpy executor of the server and of the benchmark's robots")
    parser.add_argument("--json", type=Path, default=None)


def run(args: argparse.Namespace) -> int:
    """Run both arms for every robot count, print a table, optionally write JSON."""
    os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    os.environ.setdefault("ROS_DOMAIN_ID", str(random.SystemRandom().randint(1, 100)))
    from xinfer_ros.nodes.transport_bench import through_ros

    rows: list[_Row] = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in args.robots:
            direct = percentiles(in_process_latencies(n, args.duration, args.warmup))
            ros = percentiles(through_ros(n, args.duration, args.warmup, args.camera_rate,
                                          Path(tmp), executor=args.executor))
            rows.append({"robots": n, "in_process": direct, "ros": ros,
                         "added_p50_ms": ros["p50_ms"] - direct["p50_ms"],
                         "added_p99_ms": ros["p99_ms"] - direct["p99_ms"]})
    print("EMULATED backend: model time from the rate table in both arms; "
          f"{args.executor} executor; load average {os.getloadavg()[0]:.2f}")
    print(f"{'robots':>6} {'direct P50':>11} {'ROS P50':>8} {'added':>7} "
          f"{'direct P99':>11} {'ROS P99':>8} {'added':>7}   n(direct/ROS)")
    for r in rows:
        d, o = r["in_process"], r["ros"]
        print(f"{r['robots']:>6} {d['p50_ms']:>11.2f} {o['p50_ms']:>8.2f} "
              f"{r['added_p50_ms']:>7.2f} {d['p99_ms']:>11.2f} {o['p99_ms']:>8.2f} "
              f"{r['added_p99_ms']:>7.2f}   {d['n']}/{o['n']}")
    if args.json:
        args.json.write_text(json.dumps(
            {"emulated": True, "executor": args.executor, "rows": rows}, indent=2))
    return 0

