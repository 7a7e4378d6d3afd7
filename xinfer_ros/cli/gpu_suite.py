"""One-process benchmark suite behind ``scripts/gpu_bench.sh``.

Builds the model once (the real-shape ``pi0`` preset in bfloat16 by default), checks
one request end to end, calibrates a rate table on the same lanes (and a second one for
batches of up to ``--max-batch`` units), then runs the closed-loop engine benchmark
with that torch backend for every (robots, engine) pair, then the batched async arm
and, once the Action loop is compiled, the compiled async arm at ``--arm-robots``.
The JSON report is rewritten after every run, so a suite cut short keeps its runs.
Building once matters: ``pi0`` takes far longer to build than one benchmark run.
``--dry-run`` runs the same code on the CPU: the torch backend with ``pi0-tiny`` in the
same dtype, two small fleets, a few seconds each, so that everything but the device is
exercised before a lent GPU's minutes are spent.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from xinfer_ros.cli import bench_engine
from xinfer_ros.cli.engine_report import EngineReport
from xinfer_ros.core.rate_table import write_rate_table
from xinfer_ros.engine.backends import Backend, make_backend
from xinfer_ros.engine.calibration import CalibrationSettings, calibrate
from xinfer_ros.engine.engine import StageEngine
from xinfer_ros.engine.types import EngineConfig
from xinfer_ros.model.presets import COMPILE_MODES

__all__ = ["DRY_RUN_ROBOTS", "build_parser", "main"]

#: Fleets of a dry run: the CPU serves pi0-tiny to a few robots at most.
DRY_RUN_ROBOTS = (2, 4)


def build_parser() -> argparse.ArgumentParser:
    """Command-line options of the suite."""
    p = argparse.ArgumentParser(prog="python -m xinfer_ros.cli.gpu_suite",
                                description=__doc__.splitlines()[0])
    p.add_argument("--model", default="pi0")
    p.add_argument("--device", default="cuda")
    p.add_argument("--dtype", default="bfloat16",
                   help="parameter dtype (the flow stays float32; docs/PI0.md)")
    p.add_argument("--robots", type=int, nargs="+", default=[8, 16, 24, 32])
    p.add_argument("--engines", nargs="+", default=["async", "serial"])
    p.add_argument("--workload", default="phases")
    p.add_argument("--policy", default="xinfer")
    p.add_argument("--duration", type=float, default=15.0, help="seconds per benchmark run")
    p.add_argument("--warmup", type=float, default=5.0)
    p.add_argument("--max-batch", type=int, default=4, metavar="N",
                   help="also run the async engine with batches of up to N units per stage "
                        "on --batch-slots, with a table calibrated the same way (1: off)")
    p.add_argument("--batch-slots", default="4,4,8", help="V,P,A slots of the batched arm")
    p.add_argument("--compile", choices=COMPILE_MODES, default="on",
                   help="also run the async engine with the Action loop compiled this way, "
                        "on the eager table (its rate correction learns the speed-up); off: "
                        "no such arm")
    p.add_argument("--arm-robots", type=int, nargs="+", default=[16, 32],
                   help="robot counts of the batched and compiled arms")
    p.add_argument("--calib-window", type=float, default=0.5)
    p.add_argument("--calib-max-units", type=int, default=4)
    p.add_argument("--out", type=Path, required=True, help="output directory")
    p.add_argument("--dry-run", action="store_true",
                   help="CPU, pi0-tiny, torch backend throughout, a few seconds each")
    return p


def _smoke(backend: Backend) -> dict[str, Any]:
    """One request through a fresh engine: status OK and an (H, D) chunk."""
    with StageEngine(backend, "fifo", EngineConfig(slots=(1, 1, 1))) as engine:
        first = engine.submit(backend.example_inputs(0, None), 10.0, "smoke").result(600)
        if not first.ok:
            raise SystemExit(f"smoke request failed: {first.status.name} {first.reason}")
        t0 = time.perf_counter()
        again = engine.submit(backend.example_inputs(0, first.actions), 10.0,
                              "smoke").result(600)
        warm_ms = (time.perf_counter() - t0) * 1e3
    shape = None if again.actions is None else tuple(again.actions.shape)
    if shape != backend.action_shape:
        raise SystemExit(f"smoke request returned shape {shape}, want {backend.action_shape}")
    return {"status": again.status.name, "shape": list(backend.action_shape),
            "warm_request_ms": warm_ms, "timings_ms": again.timings.to_dict()}


def _bench_args(ns: argparse.Namespace, robots: int, engine: str, table: Path,
                backend: str, *, batched: bool = False) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    bench_engine.add_arguments(parser)
    argv = ["--backend", backend, "--model", ns.model, "--device", ns.device,
            "--dtype", ns.dtype,
            "--robots", str(robots), "--engine", engine, "--workload", ns.workload,
            "--policy", ns.policy, "--duration", str(ns.duration), "--warmup", str(ns.warmup),
            "--rate-table", str(table)]
    if batched:
        argv += ["--max-batch", str(ns.max_batch), "--slots", ns.batch_slots]
    return parser.parse_args(argv)


def _calibrate(backend: Backend, ns: argparse.Namespace, max_batch: int) -> dict[str, Any]:
    """Calibrate a table for ``max_batch`` and write it under ``ns.out``."""
    t0 = time.perf_counter()
    # With batches, one more same-stage unit measures a batch of max_batch on Action
    # (the dry run's one lane per stage would otherwise never batch).
    bounds = (1, 1, 1) if ns.dry_run else (2, 2, 2)
    extra = 1 if max_batch > 1 else 0
    settings = CalibrationSettings(bounds=(bounds[0], bounds[1], bounds[2] + extra),
                                   max_units=ns.calib_max_units + extra,
                                   window_s=ns.calib_window,
                                   warmup_s=0.1 if ns.dry_run else 0.2,
                                   iso_repeats=3 if ns.dry_run else 8, max_batch=max_batch)
    tag = "" if max_batch == 1 else f"_batch{max_batch}"
    calib = calibrate(backend, settings, describe=f"model={ns.model} device={ns.device}",
                      progress=lambda line: print(f"[calibrate{tag}] {line}", flush=True))
    path = write_rate_table(calib.table, ns.out / f"rate_table_{ns.model}_"
                            f"{ns.device.replace(':', '')}{tag}.json")
    return {"table": path, "max_batch": max_batch, "seconds": time.perf_counter() - t0,
            "isolated_ms": calib.isolated_ms,
            "measured_ms": {",".join(map(str, n)): row for n, row in calib.measured.items()}}


def main(argv: Sequence[str] | None = None) -> int:
    """Run the suite; returns the exit status."""
    ns = build_parser().parse_args(argv)
    if ns.dry_run:
        ns.model, ns.device = "pi0-tiny", "cpu"
        ns.robots = ns.arm_robots = list(DRY_RUN_ROBOTS)
        # Long enough for every arm to answer: the dry run checks code paths, not speed.
        ns.duration, ns.warmup = min(ns.duration, 2.5), min(ns.warmup, 0.5)
        ns.calib_window, ns.calib_max_units = min(ns.calib_window, 0.1), min(ns.calib_max_units, 2)
    ns.out.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {"dry_run": ns.dry_run, "host": platform.node(),
                              "python": sys.version.split()[0], "steps": {}}
    t0 = time.perf_counter()
    backend = make_backend("torch", model=ns.model, device=ns.device, dtype=ns.dtype)
    report["backend"] = backend.describe()
    report["steps"]["build_s"] = time.perf_counter() - t0
    print(f"[suite] built {ns.model} on {ns.device} in {report['steps']['build_s']:.1f} s",
          flush=True)
    report["smoke"] = _smoke(backend)
    print(f"[suite] smoke ok: {report['smoke']}", flush=True)
    calibrations = [_calibrate(backend, ns, 1)]
    if ns.max_batch > 1:
        calibrations.append(_calibrate(backend, ns, ns.max_batch))
    report["steps"]["calibrate_s"] = sum(c["seconds"] for c in calibrations)
    report["calibration"] = [{**c, "table": c["table"].name} for c in calibrations]
    runs: list[EngineReport] = []
    out = ns.out / "engine_bench.json"

    def bench(robots: int, label: str, engine: str, table: Path, batched: bool) -> None:
        args = _bench_args(ns, robots, engine, table, "torch", batched=batched)
        t2 = time.perf_counter()
        rep = bench_engine.run_benchmark(args, backend)
        rep.wall_s, rep.arm = time.perf_counter() - t2, label
        runs.append(rep)
        m = rep.metrics
        print(f"[bench] robots={robots} engine={label} qps={m.throughput_rps:.2f} "
              f"p50={m.latency_p50_ms:.1f} p95={m.latency_p95_ms:.1f} "
              f"attain={m.attainment * 100:.1f}% pred_mae="
              f"{rep.prediction.get('mae_ms', float('nan')):.2f} ms", flush=True)
        _write(out, report, runs)  # a suite cut short by its timeout keeps what it ran

    eager_table = calibrations[0]["table"]
    for robots in ns.robots:
        for engine in ns.engines:
            bench(robots, engine, engine, eager_table, False)
    if ns.max_batch > 1:
        for robots in ns.arm_robots:
            bench(robots, f"async+batch{ns.max_batch}", "async", calibrations[-1]["table"], True)
    if ns.compile != "off":
        try:
            report["steps"]["compile_s"] = backend.set_compile(ns.compile)
        except Exception as exc:  # a compiler failure must not cost the other arms
            report["compile_error"] = f"{type(exc).__name__}: {exc}"
            print(f"[suite] compile {ns.compile} failed: {report['compile_error']}", flush=True)
        else:
            print(f"[suite] Action loop compiled ({ns.compile}) in "
                  f"{report['steps']['compile_s']:.1f} s", flush=True)
            for robots in ns.arm_robots:
                bench(robots, f"async+compile-{ns.compile}", "async", eager_table, False)
    report["steps"]["total_s"] = time.perf_counter() - t0
    _write(out, report, runs)
    print(f"[suite] wrote {out} and {len(calibrations)} table(s) in "
          f"{report['steps']['total_s']:.1f} s", flush=True)
    backend.close()
    return 0


def _write(out: Path, report: dict[str, Any], runs: list[EngineReport]) -> None:
    """Write the report with every run so far and its summary."""
    report["runs"] = [r.to_dict() for r in runs]
    report["summary"] = [{"robots": r.robots, "engine": r.arm,
                          "throughput_rps": r.metrics.throughput_rps,
                          "p50_ms": r.metrics.latency_p50_ms,
                          "p99_ms": r.metrics.latency_p99_ms,
                          "attainment": r.metrics.attainment,
                          "prediction_mae_ms": r.prediction.get("mae_ms")} for r in runs]
    out.write_text(json.dumps(report, indent=1, default=str) + "\n", encoding="utf-8")


if __name__ == "__main__":
    sys.exit(main())
