"""``xinfer-bench openpi``: what the openpi WebSocket path adds to request-to-chunk latency.

Side by side in one run, for each client count: closed-loop robots (Eq. 1, one
request in flight, next send at ``max(s_j + T_E, r_j)``) drive the same emulated
engine (a) in process, calling ``StageEngine.submit`` directly, and (b) through the
openpi endpoint: an ``xinfer-serve --openpi`` process on 127.0.0.1, with every client
sending msgpack-numpy observations in the ALOHA layout with three cameras at the
model's sizes (224x352 / 224x320 / 224x320 uint8, no resize needed) and a 14-value
state, as the ROS benchmark streams them. The difference of the medians (and of the
P99s) is the transport overhead: serialization, WebSocket on loopback, decoding and
observation mapping. ``--ros`` adds the ROS arm of ``xinfer-bench transport`` to the
same table (needs the built ROS workspace). The emulated backend keeps model time
identical in every arm.

Arm differences are sensitive to CPU contention on a shared host, so the openpi arm
also reports a *paired* overhead, robust to it: per request, the client's round trip
minus the engine's own submit-to-result time for that request (``policy_timing``).
``--rounds`` repeats all arms back to back and pools the samples.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from xinfer_ros.core.constants import SEND_PERIOD as PERIOD_S
from xinfer_ros.engine.latency_arms import (
    BUDGET_MS,
    REPLY_TIMEOUT_S,
    in_process_latencies,
    percentiles,
    run_blocking_robots,
)

__all__ = ["add_arguments", "run"]



def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the openpi transport benchmark's flags."""
    parser.add_argument("--robots", type=int, nargs="+", default=[1, 4, 8],
                        help="client counts")
    parser.add_argument("--duration", type=float, default=15.0, help="seconds per arm")
    parser.add_argument("--warmup", type=float, default=3.0, help="unmeasured seconds")
    parser.add_argument("--rounds", type=int, default=1,
                        help="repeat every arm this often, back to back; samples pooled")
    parser.add_argument("--ros", action="store_true",
                        help="also run the ROS arm (xinfer-bench transport) side by side")
    parser.add_argument("--camera-rate", type=float, default=10.0,
                        help="ROS arm: frames/s per camera")
    parser.add_argument("--json", type=Path, default=None)


def _observation(index: int) -> dict[str, Any]:
    from xinfer_ros.model.config import load_preset

    rng = np.random.default_rng(index)
    cams = [(c.height, c.width) for c in load_preset("tiny").cameras]
    names = ("cam_high", "cam_left_wrist", "cam_right_wrist")
    return {"images": {n: rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
                       for n, (h, w) in zip(names, cams, strict=True)},
            "state": np.zeros(14), "prompt": "pick up the parcel and place it in the bin",
            "xinfer/budget_ms": BUDGET_MS}


def _start_server() -> tuple[subprocess.Popen[str], int]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "xinfer_ros.cli.serve", "--openpi", "--host", "127.0.0.1",
         "--port", "0", "--backend", "emulated", "--model", "tiny", "--policy", "xinfer",
         "--layout", "aloha", "--log-level", "WARNING"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=dict(os.environ))
    deadline = time.monotonic() + 60.0
    while time.monotonic() < deadline and proc.poll() is None:
        line = proc.stdout.readline() if proc.stdout is not None else ""
        if "ws://127.0.0.1:" in line:
            return proc, int(line.split("ws://127.0.0.1:")[1].split()[0])
    proc.kill()
    raise RuntimeError("xinfer-serve --openpi did not report its port within 60 s")


def _through_openpi(robots: int, duration: float,
                    warmup: float) -> tuple[list[float], list[float]]:
    from xinfer_ros.openpi.client import OpenPIClient

    proc, port = _start_server()
    clients: list[OpenPIClient] = []
    try:
        clients = [OpenPIClient(f"ws://127.0.0.1:{port}/bench_{i}", timeout_s=REPLY_TIMEOUT_S)
                   for i in range(robots)]
        observations = [_observation(i) for i in range(robots)]
        def request(i: int) -> float:
            return float(clients[i].infer(observations[i])["policy_timing"]["infer_ms"])

        return run_blocking_robots(robots, duration, warmup, request)
    finally:
        for c in clients:
            c.close()
        proc.terminate()
        proc.wait(timeout=20)


def _through_ros(robots: int, duration: float, warmup: float, camera_rate: float,
                 workdir: Path) -> list[float]:
    from xinfer_ros.nodes.transport_bench import through_ros

    os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    os.environ.setdefault("ROS_DOMAIN_ID", str(random.SystemRandom().randint(1, 100)))
    return through_ros(robots, duration, warmup, camera_rate, workdir)


def _row(robots: int, arms: dict[str, dict[str, float]]) -> dict[str, Any]:
    base = arms["in_process"]
    row: dict[str, Any] = {"robots": robots, **arms}
    for name in arms:
        if name != "in_process":
            row[f"{name}_added_p50_ms"] = arms[name]["p50_ms"] - base["p50_ms"]
            row[f"{name}_added_p99_ms"] = arms[name]["p99_ms"] - base["p99_ms"]
    return row


def run(args: argparse.Namespace) -> int:
    """Run every arm for every client count, print a table, optionally write JSON."""
    samples: dict[int, dict[str, list[float]]] = {
        n: {"in_process": [], "openpi": [], "openpi_paired": [], "ros": []}
        for n in args.robots}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(max(1, args.rounds)):
            for n in args.robots:
                s = samples[n]
                s["in_process"] += in_process_latencies(n, args.duration, args.warmup)
                lat, paired = _through_openpi(n, args.duration, args.warmup)
                s["openpi"] += lat
                s["openpi_paired"] += paired
                if args.ros:
                    s["ros"] += _through_ros(n, args.duration, args.warmup, args.camera_rate,
                                             Path(tmp))
    rows: list[dict[str, Any]] = []
    for n in args.robots:
        s = samples[n]
        arms = {"in_process": percentiles(s["in_process"]), "openpi": percentiles(s["openpi"])}
        if args.ros:
            arms["ros"] = percentiles(s["ros"])
        rows.append({**_row(n, arms), "openpi_paired": percentiles(s["openpi_paired"])})
    names = [a for a in ("openpi", "ros") if a in rows[0]] if rows else []
    print("EMULATED backend: model time from the rate table in every arm; added = arm - "
          "in-process (ms)")
    head = f"{'robots':>6} {'direct P50':>10} {'direct P99':>10}"
    for a in names:
        head += f" {a + ' P50':>10} {'+P50':>7} {a + ' P99':>10} {'+P99':>7}"
    print(head + "   n")
    for r in rows:
        d = r["in_process"]
        line = f"{r['robots']:>6} {d['p50_ms']:>10.2f} {d['p99_ms']:>10.2f}"
        counts = [str(d["n"])]
        for a in names:
            line += (f" {r[a]['p50_ms']:>10.2f} {r[f'{a}_added_p50_ms']:>7.2f}"
                     f" {r[a]['p99_ms']:>10.2f} {r[f'{a}_added_p99_ms']:>7.2f}")
            counts.append(str(r[a]["n"]))
        print(line + "   " + "/".join(counts))
    print("openpi paired overhead (round trip - engine latency, per request):")
    for r in rows:
        q = r["openpi_paired"]
        print(f"{r['robots']:>6} clients: P50 {q['p50_ms']:.2f} ms  P99 {q['p99_ms']:.2f} ms  "
              f"(n={q['n']})")
    if args.json:
        args.json.write_text(json.dumps({"emulated": True, "budget_ms": BUDGET_MS,
                                         "period_s": PERIOD_S, "rounds": args.rounds,
                                         "duration_s": args.duration, "rows": rows},
                                        indent=2))
    return 0
