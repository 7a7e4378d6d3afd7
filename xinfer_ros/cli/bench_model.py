"""``xinfer-bench model``: per-stage latency and FLOPs of the reference VLA.

Times CPU preparation, ViT, Prefill, Action (RTC-guided by default, d = 8) and output
processing of one request at a time, back to back, on synthetic inputs, and counts the
FLOPs of each stage on the meta device. On CUDA every stage is synchronised before its
clock stops.

The "cpu med" column is the calling thread's CPU time (meaningful on CPU with one
thread): on a shared machine it separates the work from the wait for a core.

CPU threads: the default is one intra-op thread. The tiny preset's matrices are so
small that a second OpenMP thread only adds synchronisation, and on a machine shared
with other work a spinning second thread can stall for milliseconds.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["STAGES", "add_arguments", "run"]

#: Timed phases of one request, in order.
STAGES: tuple[str, ...] = ("prepare", "vit", "prefill", "action", "output")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``model`` benchmark's options to ``parser``."""
    parser.add_argument("--model", default="tiny", help="preset name or YAML path (tiny)")
    parser.add_argument("--checkpoint", default=None, help="load weights from this directory")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--iters", type=int, default=50, help="timed requests (50)")
    parser.add_argument("--warmup", type=int, default=5, help="untimed requests first (5)")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (1)")
    parser.add_argument("--d", type=int, default=8, help="RTC commit length (8)")
    parser.add_argument("--no-rtc", action="store_true", help="no previous chunk / guidance")
    parser.add_argument("--no-flops", action="store_true", help="skip FLOP counting")
    parser.add_argument(
        "--flops-only",
        action="store_true",
        help="count FLOPs on the meta device without building weights or timing",
    )
    parser.add_argument("--json", default=None, metavar="FILE", help="also write results here")


def _sync(device: str) -> Callable[[], None]:
    import torch

    if device == "cuda":
        return torch.cuda.synchronize
    return lambda: None


def _summary(samples_ms: list[float]) -> dict[str, float]:
    arr = np.asarray(samples_ms, dtype=np.float64)
    return {
        "median_ms": float(np.median(arr)),
        "p99_ms": float(np.percentile(arr, 99)),
        "mean_ms": float(arr.mean()),
        "min_ms": float(arr.min()),
    }


def _time_requests(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    from xinfer_ros.model import stages
    from xinfer_ros.model.config import load_preset
    from xinfer_ros.model.processing import postprocess_actions, prepare_request
    from xinfer_ros.model.request import RequestState
    from xinfer_ros.model.synthetic import synthetic_inputs
    from xinfer_ros.model.vla import ReferenceVLA

    torch.set_num_threads(max(1, args.threads))
    if args.checkpoint:
        model = ReferenceVLA.from_pretrained(args.checkpoint, device=args.device)
    else:
        model = ReferenceVLA.build(load_preset(args.model), device=args.device)
    config = model.config
    inputs = synthetic_inputs(config)
    sync = _sync(args.device)
    times: dict[str, list[float]] = {name: [] for name in (*STAGES, "request")}
    cpu_times: dict[str, list[float]] = {name: [] for name in (*STAGES, "request")}
    prefix_len = 0
    for i in range(args.warmup + args.iters):
        t0 = time.perf_counter()
        c0 = time.thread_time()
        prepared = prepare_request(
            config,
            model.tokenizer,
            inputs.images,
            inputs.instruction,
            inputs.state,
            prev_chunk=None if args.no_rtc else inputs.prev_chunk,
            d=0 if args.no_rtc else args.d,
            seed=i,
        )
        req = RequestState(prepared)
        marks = [t0, time.perf_counter()]
        cpu_marks = [c0, time.thread_time()]
        for stage in (stages.vit, stages.prefill, stages.action):
            stage(model, req)
            sync()
            marks.append(time.perf_counter())
            cpu_marks.append(time.thread_time())
        postprocess_actions(req.actions, config, prepared.rtc)
        marks.append(time.perf_counter())
        cpu_marks.append(time.thread_time())
        prefix_len = req.prefix_len
        if i < args.warmup:
            continue
        for name, start, end in zip(STAGES, marks[:-1], marks[1:], strict=True):
            times[name].append((end - start) * 1e3)
        times["request"].append((marks[-1] - marks[0]) * 1e3)
        for name, start, end in zip(STAGES, cpu_marks[:-1], cpu_marks[1:], strict=True):
            cpu_times[name].append((end - start) * 1e3)
        cpu_times["request"].append((cpu_marks[-1] - cpu_marks[0]) * 1e3)
    return {
        "config": config,
        "params": model.num_parameters_by_stage(),
        "prefix_len": prefix_len,
        "timings": {name: _summary(vals) for name, vals in times.items()},
        # CPU time of the calling thread: with one torch thread on CPU it is the work
        # itself, without the time other processes on a shared machine took.
        "cpu_timings": {name: _summary(vals) for name, vals in cpu_times.items()},
        "threads": torch.get_num_threads(),
    }


def _flops_only(args: argparse.Namespace) -> int:
    from xinfer_ros.model.config import load_preset
    from xinfer_ros.model.flops import count_stage_flops
    from xinfer_ros.model.vla import ReferenceVLA

    config = load_preset(args.model)
    flops = count_stage_flops(config, rtc=not args.no_rtc, d=args.d)
    params = ReferenceVLA.build(config, device="meta").num_parameters_by_stage()
    print(f"model={config.name} prefix_len={flops['prefix_len']} (FLOPs only, meta device)")
    print(f"{'stage':<10}{'GFLOP':>11}{'params M':>10}")
    for name in ("vit", "prefill", "action"):
        print(f"{name:<10}{flops[name] / 1e9:11.3f}{params[name] / 1e6:10.2f}")
    if args.json:
        payload = {
            "model": config.name,
            "prefix_len": flops["prefix_len"],
            "rtc_d": None if args.no_rtc else args.d,
            "flops": {k: v for k, v in flops.items() if k != "prefix_len"},
            "params": params,
        }
        Path(args.json).write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    return 0


def run(args: argparse.Namespace) -> int:
    """Run the benchmark, print a table and optionally write JSON; return 0."""
    from xinfer_ros.model.flops import count_stage_flops

    if args.flops_only:
        return _flops_only(args)
    result = _time_requests(args)
    config = result["config"]
    flops: dict[str, int] = {}
    if not args.no_flops:
        flops = count_stage_flops(config, rtc=not args.no_rtc, d=args.d)
    timings = result["timings"]
    gpu_total = sum(timings[s]["median_ms"] for s in ("vit", "prefill", "action"))
    print(
        f"model={config.name} device={args.device} threads={result['threads']} "
        f"iters={args.iters} prefix_len={result['prefix_len']} "
        f"rtc={'off' if args.no_rtc else f'd={args.d}'}"
    )
    print(
        f"{'stage':<10}{'median ms':>11}{'p99 ms':>10}{'cpu med':>9}{'share':>8}"
        f"{'GFLOP':>11}{'params M':>10}"
    )
    for name in (*STAGES, "request"):
        row = timings[name]
        cpu_med = result["cpu_timings"][name]["median_ms"]
        share = (
            f"{100.0 * row['median_ms'] / gpu_total:6.1f}%"
            if name in ("vit", "prefill", "action")
            else ""
        )
        gflop = f"{flops[name] / 1e9:11.3f}" if name in flops else ""
        params = f"{result['params'][name] / 1e6:10.2f}" if name in result["params"] else ""
        print(
            f"{name:<10}{row['median_ms']:11.2f}{row['p99_ms']:10.2f}{cpu_med:9.2f}{share:>8}"
            f"{gflop:>11}{params:>10}"
        )
    if args.json:
        payload = {
            "model": config.name,
            "device": args.device,
            "threads": result["threads"],
            "iters": args.iters,
            "warmup": args.warmup,
            "rtc_d": None if args.no_rtc else args.d,
            "prefix_len": result["prefix_len"],
            "timings_ms": timings,
            "cpu_timings_ms": result["cpu_timings"],
            "flops": {k: v for k, v in flops.items() if k != "prefix_len"},
            "params": result["params"],
        }
        Path(args.json).write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    return 0
