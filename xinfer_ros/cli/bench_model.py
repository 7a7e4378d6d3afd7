"""``xinfer-bench model``: per-stage latency, FLOPs and π0 parity of a served model.

Times CPU preparation, ViT, Prefill, Action (RTC-guided by default, d = 8) and output
processing of one request at a time, back to back, on synthetic inputs, and counts the
FLOPs of each stage on the meta device. Works for every preset family (π0's ``pi0``,
``pi0-tiny`` or a checkpoint directory; the reference ``tiny``, ``vla-2b``, ``pi05``).
On CUDA every stage is synchronised before its clock stops.

``--compile on`` (π0 only) runs the Action loop compiled (``torch.compile``; compiled
during the warm-up requests) and also times, in the same iteration and in alternating
order, an eager Action unit on a copy of the same state: ``action_eager`` beside
``action``, and their ratio.

``--parity`` (π0 only) instead compares the stage split with transformers' own
``PI0ForConditionalGeneration.sample_actions`` on identical tensors and weights, for
``--iters`` requests with different inputs and noise, and reports ``max_abs_diff``;
the exit status is 1 when it exceeds 1e-5.

The "cpu med" column is the calling thread's CPU time (meaningful on CPU with one
thread): on a shared machine it separates the work from the wait for a core.

CPU threads: the default is one intra-op thread. The tiny presets' matrices are so
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

from xinfer_ros.model.presets import COMPILE_MODES

__all__ = ["STAGES", "add_arguments", "run"]

#: Timed phases of one request, in order.
STAGES: tuple[str, ...] = ("prepare", "vit", "prefill", "action", "output")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``model`` benchmark's options to ``parser``."""
    parser.add_argument("--model", default="pi0-tiny",
                        help="preset name or YAML path (pi0-tiny)")
    parser.add_argument("--model-path", "--checkpoint", dest="model_path", default=None,
                        metavar="DIR", help="load weights from this checkpoint directory")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--dtype", default=None, help="parameter dtype (preset default)")
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
    parser.add_argument("--compile", choices=COMPILE_MODES, default="off",
                        help="π0: compiled Action loop, timed against eager side by side")
    parser.add_argument("--parity", action="store_true",
                        help="π0: compare the stage split with transformers' sample_actions")
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


def _load(args: argparse.Namespace) -> Any:
    import torch

    from xinfer_ros.model.loading import load_stage_model

    torch.set_num_threads(max(1, args.threads))
    return load_stage_model(args.model, model_path=args.model_path, device=args.device,
                            dtype=args.dtype, compile_mode=getattr(args, "compile", "off"))


def _time_requests(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    from xinfer_ros.model.synthetic import synthetic_inputs

    model = _load(args)
    inputs = synthetic_inputs(model.io)
    sync = _sync(args.device)
    times: dict[str, list[float]] = {name: [] for name in (*STAGES, "request")}
    cpu_times: dict[str, list[float]] = {name: [] for name in (*STAGES, "request")}
    eager: list[float] = []
    prefix_len = 0
    compared = model.compile_mode != "off"
    for i in range(args.warmup + args.iters):
        wall: dict[str, float] = {}
        cpu: dict[str, float] = {}

        def timed(name: str, call: Callable[..., Any], *call_args: Any,
                  wall: dict[str, float] = wall, cpu: dict[str, float] = cpu,
                  **call_kwargs: Any) -> Any:
            t0, c0 = time.perf_counter(), time.thread_time()
            out = call(*call_args, **call_kwargs)
            sync()
            wall[name] = (time.perf_counter() - t0) * 1e3
            cpu[name] = (time.thread_time() - c0) * 1e3
            return out

        state = timed("prepare", model.prepare, inputs.images, inputs.instruction,
                      inputs.state, prev_chunk=None if args.no_rtc else inputs.prev_chunk,
                      d=0 if args.no_rtc else args.d, seed=i)
        timed("vit", model.vit, state)
        timed("prefill", model.prefill, state)
        # The eager twin runs before the compiled unit in odd iterations, after it in
        # even ones, so that neither always finds the caches warm.
        if compared and i % 2:
            eager.append(_eager_action_ms(model, state, sync))
        timed("action", model.action, state)
        if compared and not i % 2:
            eager.append(_eager_action_ms(model, state, sync))
        timed("output", model.finish, state)
        prefix_len = model.prefix_length(state)
        model.release(state)
        if i < args.warmup:
            continue
        for name in STAGES:
            times[name].append(wall[name])
            cpu_times[name].append(cpu[name])
        times["request"].append(sum(wall.values()))
        cpu_times["request"].append(sum(cpu.values()))
    if eager:
        times["action_eager"] = eager[args.warmup:]
    return {
        "model": model.io.name,
        "horizon": model.io.horizon,
        "dtype": str(model.dtype).removeprefix("torch."),
        "params": model.num_parameters_by_stage(),
        "prefix_len": prefix_len,
        "timings": {name: _summary(vals) for name, vals in times.items()},
        # CPU time of the calling thread: with one torch thread on CPU it is the work
        # itself, without the time other processes on a shared machine took.
        "cpu_timings": {name: _summary(vals) for name, vals in cpu_times.items()},
        "threads": torch.get_num_threads(),
    }


def _eager_action_ms(model: Any, state: Any, sync: Callable[[], None]) -> float:
    """Time one eager Action unit on a copy of ``state`` (before or after its own)."""
    from xinfer_ros.core.stages import Stage

    mode = model.compile_mode
    copy = model.copy_at(state, Stage.ACTION)
    model.set_compile("off")
    try:
        t0 = time.perf_counter()
        model.action(copy)
        sync()
        return (time.perf_counter() - t0) * 1e3
    finally:
        model.set_compile(mode)
        model.release(copy)


def _write(path: str | None, payload: dict[str, Any]) -> None:
    if path:
        Path(path).write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")


def _flops_only(args: argparse.Namespace) -> int:
    from xinfer_ros.model.flops import count_stage_flops
    from xinfer_ros.model.loading import load_stage_model

    flops = count_stage_flops(args.model, rtc=not args.no_rtc, d=args.d,
                              model_path=args.model_path)
    model = load_stage_model(args.model, model_path=args.model_path, device="meta")
    params = model.num_parameters_by_stage()
    print(f"model={model.io.name} prefix_len={flops['prefix_len']} (FLOPs only, meta device)")
    print(f"{'stage':<10}{'GFLOP':>11}{'params M':>10}")
    for name in ("vit", "prefill", "action"):
        print(f"{name:<10}{flops[name] / 1e9:11.3f}{params[name] / 1e6:10.2f}")
    _write(args.json, {
        "model": model.io.name,
        "prefix_len": flops["prefix_len"],
        "rtc_d": None if args.no_rtc else args.d,
        "flops": {k: v for k, v in flops.items() if k != "prefix_len"},
        "params": params,
    })
    return 0


def _parity(args: argparse.Namespace) -> int:
    import torch

    from xinfer_ros.model.pi0.checkpoint import build_model
    from xinfer_ros.model.pi0.parity import PARITY_TOLERANCE, check_parity, parity_request
    from xinfer_ros.model.pi0.preset import Pi0Preset, resolve_pi0
    from xinfer_ros.model.presets import load_model_preset

    preset = load_model_preset(args.model)
    if not isinstance(preset, Pi0Preset):
        print(f"xinfer-bench model: --parity compares with transformers' PI0; "
              f"{args.model!r} is not a π0 preset")
        return 2
    torch.set_num_threads(max(1, args.threads))
    # Model units only: the directory needs weights and a config, no tokenizer or stats.
    config, spec = resolve_pi0(preset, args.model_path, strict=False)
    model = build_model(config, spec, device=args.device, dtype=args.dtype)
    results = [check_parity(model, parity_request(spec, seed)) for seed in
               range(max(1, args.iters))]
    worst = max(r.max_abs_diff for r in results)
    ok = worst <= PARITY_TOLERANCE
    source = args.model_path or f"preset {args.model} (random weights)"
    print(f"parity of {source}: {len(results)} requests, chunk {list(results[0].shape)}, "
          f"max_abs_diff={worst:.3e} (largest |action| {max(r.max_abs_value for r in results):.3f}"
          f"; tolerance {PARITY_TOLERANCE:g}) -> {'OK' if ok else 'FAIL'}")
    _write(args.json, {
        "model": spec.name, "model_path": args.model_path, "device": args.device,
        "dtype": str(model.dtype).removeprefix("torch."), "requests": len(results),
        "shape": list(results[0].shape), "max_abs_diff": worst,
        "per_request": [r.max_abs_diff for r in results], "tolerance": PARITY_TOLERANCE,
        "ok": ok,
    })
    return 0 if ok else 1


def run(args: argparse.Namespace) -> int:
    """Run the benchmark, print a table and optionally write JSON; return 0."""
    from xinfer_ros.model.flops import count_stage_flops

    if args.parity:
        return _parity(args)
    if args.flops_only:
        return _flops_only(args)
    result = _time_requests(args)
    flops: dict[str, int] = {}
    if not args.no_flops:
        flops = count_stage_flops(args.model, rtc=not args.no_rtc, d=args.d,
                                  model_path=args.model_path)
    timings = result["timings"]
    gpu_total = sum(timings[s]["median_ms"] for s in ("vit", "prefill", "action"))
    print(
        f"model={result['model']} device={args.device} dtype={result['dtype']} "
        f"threads={result['threads']} iters={args.iters} prefix_len={result['prefix_len']} "
        f"H={result['horizon']} rtc={'off' if args.no_rtc else f'd={args.d}'}"
    )
    print(
        f"{'stage':<10}{'median ms':>11}{'p99 ms':>10}{'cpu med':>9}{'share':>8}"
        f"{'GFLOP':>11}{'params M':>10}"
    )
    for name in (*STAGES, "request", *(["action_eager"] if "action_eager" in timings else [])):
        row = timings[name]
        cpu_med = result["cpu_timings"].get(name, {}).get("median_ms", float("nan"))
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
    speedup = None
    if "action_eager" in timings:
        speedup = timings["action_eager"]["median_ms"] / timings["action"]["median_ms"]
        print(f"Action compiled ({args.compile}) against eager, same states, alternating: "
              f"{speedup:.2f}x faster (medians)")
    _write(args.json, {
        "compile": args.compile,
        "compile_speedup": speedup,
        "model": result["model"],
        "model_path": args.model_path,
        "device": args.device,
        "dtype": result["dtype"],
        "threads": result["threads"],
        "iters": args.iters,
        "warmup": args.warmup,
        "rtc_d": None if args.no_rtc else args.d,
        "prefix_len": result["prefix_len"],
        "horizon": result["horizon"],
        "timings_ms": timings,
        "cpu_timings_ms": result["cpu_timings"],
        "flops": {k: v for k, v in flops.items() if k != "prefix_len"},
        "params": result["params"],
    })
    return 0
