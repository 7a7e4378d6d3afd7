"""One-process benchmark suite behind ``scripts/gpu_bench.sh``.

Builds the model once (the real-shape ``pi0`` preset in bfloat16 by default) and checks
one request end to end. Then three groups of closed-loop engine runs with that torch
backend, each on a rate table calibrated the way it serves:

1. the Action loop compiled (``--compile``, CUDA graphs by default) on one Action lane,
   async on each ``--compiled-slots`` layout against serial at every ``--robots``: what
   a GPU should serve with. The first H200 run (docs/BENCHMARKS.md, "On one H200") found
   the eager Action unit launch-bound at about 0.5 s, slower than every budget, and CUDA
   graphs 13x faster; on one H100 (2026-12-06) async on 4,4,1 answered nothing from 16
   robots where serial served 6 a second, with ViT and Prefill units 7-12x slower than
   alone, so the default layouts also run 2,2,1 and 1,1,1 (a pipeline), and 4,4,1 once
   more with ``shed_doomed`` (``--doomed-slots``: waiting requests predicted to answer
   past their deadline are shed before their early stages slow the others; in
   emulation on that H100's table it turned 4.0-5.0 on-time answers a second at 16
   robots into 8.5-10.0, serial 7.0-8.9: docs/BENCHMARKS.md 4.6);
2. the eager Action loop, async against serial at ``--eager-robots`` (none by default:
   three leases measured it, async level with serial in answers and none on time);
3. the eager async engine with batches of up to ``--max-batch`` units per stage at
   ``--arm-robots``: one interleaved run (``xinfer-bench engine --interleave``) of the
   saturation switch the shipped configuration serves, pinned unbatched, pinned
   batched and on its own meter in turn, so that the arms share every second of the
   run (``--interleave 0``: one lane-batched run of ``--policy`` instead).

The JSON report is rewritten after every run, so a suite cut short keeps its runs, and
the groups come in that order so that a cut costs the least informative one.
Building once matters: ``pi0`` takes far longer to build than one benchmark run.
``--dry-run`` runs the same code on the CPU: the torch backend with ``pi0-tiny`` in the
same dtype, small fleets, a few seconds each, and ``torch.compile`` standing in for
CUDA graphs (which need CUDA) on the same one-lane layout, so that everything but the
device is exercised before a lent GPU's minutes are spent.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from xinfer_ros.cli import bench_engine
from xinfer_ros.cli.engine_report import EngineReport
from xinfer_ros.cli.torch_options import stage_counts
from xinfer_ros.core.rate_table import write_rate_table
from xinfer_ros.engine.backends import Backend, make_backend
from xinfer_ros.engine.calibration import CalibrationSettings, calibrate
from xinfer_ros.engine.engine import StageEngine
from xinfer_ros.engine.types import EngineConfig
from xinfer_ros.model.presets import COMPILE_MODES

__all__ = ["COMPILED_LAYOUTS", "DOOMED_LAYOUTS", "DRY_RUN_ARM_ROBOTS", "DRY_RUN_COMPILE",
           "DRY_RUN_ROBOTS", "build_parser", "main"]

#: Fleets of a dry run: the CPU serves pi0-tiny to a few robots at most.
DRY_RUN_ROBOTS = (2, 4)
#: Fleets of a dry run's eager and batched groups.
DRY_RUN_ARM_ROBOTS = (4,)
#: What a dry run compiles with where CUDA graphs were asked for: they need CUDA.
DRY_RUN_COMPILE = "on"
#: Units of each stage the eager and batched groups' calibrations measure side by side
#: (the batched group's lanes on 4,4,8 slots in batches of 4 are 1,1,2).
DEFAULT_CALIB_BOUNDS = (2, 2, 2)
#: The first group's async slot layouts: the paper's 4 ViT and Prefill slots, the 2 a
#: stage's calibration measures at most, and one unit a stage.
COMPILED_LAYOUTS: tuple[tuple[int, int, int], ...] = ((4, 4, 1), (2, 2, 1), (1, 1, 1))
#: The first group's async layouts run once more with ``shed_doomed``.
DOOMED_LAYOUTS: tuple[tuple[int, int, int], ...] = ((4, 4, 1),)


def build_parser() -> argparse.ArgumentParser:
    """Command-line options of the suite."""
    p = argparse.ArgumentParser(prog="python -m xinfer_ros.cli.gpu_suite",
                                description=__doc__.splitlines()[0])
    p.add_argument("--model", default="pi0")
    p.add_argument("--device", default="cuda")
    p.add_argument("--dtype", default="bfloat16",
                   help="parameter dtype (the flow stays float32; docs/PI0.md)")
    p.add_argument("--robots", type=int, nargs="+", default=[8, 16])
    p.add_argument("--engines", nargs="+", default=["async", "serial"])
    p.add_argument("--workload", default="phases")
    p.add_argument("--policy", default="xinfer")
    p.add_argument("--duration", type=float, default=15.0, help="seconds per benchmark run")
    p.add_argument("--warmup", type=float, default=5.0)
    p.add_argument("--compile", choices=COMPILE_MODES, default="cudagraphs",
                   help="Action loop of the first group (off: that group runs eager)")
    p.add_argument("--compiled-slots", type=stage_counts(1), nargs="+",
                   default=list(COMPILED_LAYOUTS), metavar="V,P,A",
                   help="the first group's async arms, one per V,P,A slot layout (CUDA "
                        "graphs allow one Action lane)")
    p.add_argument("--doomed-slots", type=stage_counts(1), nargs="*",
                   default=list(DOOMED_LAYOUTS), metavar="V,P,A",
                   help="the first group's async arms with EngineConfig.shed_doomed, one per "
                        "layout (none: no such arm)")
    p.add_argument("--eager-robots", type=int, nargs="*", default=[],
                   help="robot counts of the eager group (none: no such group)")
    p.add_argument("--max-batch", type=int, default=4, metavar="N",
                   help="batches of up to N units per stage in the last group (1: no such "
                        "group)")
    p.add_argument("--batch-slots", type=stage_counts(1), default=(4, 4, 8),
                   help="V,P,A slots of the batched group")
    p.add_argument("--arm-robots", type=int, nargs="*", default=[16],
                   help="robot counts of the batched group")
    p.add_argument("--interleave", type=float, default=2.0, metavar="SECONDS",
                   help="batched group: segments of an interleaved run of the saturation "
                        "switch (off, on, auto), the first quarter of each not counted "
                        "(0: one lane-batched run of --policy)")
    p.add_argument("--interleave-cycles", type=int, default=4,
                   help="batched group: cycles of the interleaved run (each runs the three "
                        "arms once)")
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
                backend: str, *, slots: tuple[int, int, int] | None = None,
                max_batch: int = 1) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    bench_engine.add_arguments(parser)
    argv = ["--backend", backend, "--model", ns.model, "--device", ns.device,
            "--dtype", ns.dtype,
            "--robots", str(robots), "--engine", engine, "--workload", ns.workload,
            "--policy", ns.policy, "--duration", str(ns.duration), "--warmup", str(ns.warmup),
            "--rate-table", str(table), "--max-batch", str(max_batch)]
    args = parser.parse_args(argv)
    if slots is not None:
        args.slots = slots  # parsed already (stage_counts), as --slots would give it
    return args


def _calibrate(backend: Backend, ns: argparse.Namespace, max_batch: int, tag: str,
               lanes: tuple[int, int, int] = DEFAULT_CALIB_BOUNDS) -> dict[str, Any]:
    """Calibrate a table for ``max_batch`` and write it under ``ns.out``.

    ``lanes``: the most units of each stage measured side by side, the lanes the
    table's runs serve on (beyond them the predictor clips; one Action lane where the
    Action loop replays CUDA graphs, which a second lane may not share).
    """
    t0 = time.perf_counter()
    # With batches, one more same-stage unit measures a batch of max_batch on Action
    # (the dry run's one lane per stage would otherwise never batch).
    bounds = (1, 1, 1) if ns.dry_run else lanes
    extra = 1 if max_batch > 1 else 0
    settings = CalibrationSettings(bounds=(bounds[0], bounds[1], bounds[2] + extra),
                                   max_units=ns.calib_max_units + extra,
                                   window_s=ns.calib_window,
                                   warmup_s=0.1 if ns.dry_run else 0.2,
                                   iso_repeats=3 if ns.dry_run else 8, max_batch=max_batch,
                                   # Each stage's batch cost up to max_batch, measured
                                   # alone (the switch prices its lanes by it), as the
                                   # shipped CPU table was calibrated.
                                   batch_factors=max_batch > 1)
    calib = calibrate(backend, settings, describe=f"model={ns.model} device={ns.device} "
                                                  f"compile={backend.compile_mode}",
                      progress=lambda line: print(f"[calibrate{tag}] {line}", flush=True))
    path = write_rate_table(calib.table, ns.out / f"rate_table_{ns.model}_"
                            f"{ns.device.replace(':', '')}{tag}.json")
    return {"table": path, "max_batch": max_batch, "compile": backend.compile_mode,
            "seconds": time.perf_counter() - t0, "isolated_ms": calib.isolated_ms,
            "measured_ms": {",".join(map(str, n)): row for n, row in calib.measured.items()}}


def _settle(ns: argparse.Namespace) -> None:
    """Apply the dry run's small settings and refuse a layout CUDA graphs cannot serve."""
    if ns.dry_run:
        ns.model, ns.device = "pi0-tiny", "cpu"
        ns.robots = list(DRY_RUN_ROBOTS)
        ns.eager_robots = list(DRY_RUN_ARM_ROBOTS) if ns.eager_robots else []
        ns.arm_robots = list(DRY_RUN_ARM_ROBOTS) if ns.arm_robots else []
        if ns.compile == "cudagraphs":
            ns.compile = DRY_RUN_COMPILE
        # Long enough for every arm to answer: the dry run checks code paths, not speed.
        ns.duration, ns.warmup = min(ns.duration, 2.5), min(ns.warmup, 0.5)
        ns.interleave, ns.interleave_cycles = min(ns.interleave, 0.5), min(ns.interleave_cycles, 2)
        ns.calib_window, ns.calib_max_units = min(ns.calib_window, 0.1), min(ns.calib_max_units, 2)
    # The engine's own rule (one Action lane per slot, unbatched), checked before the
    # model is built rather than after minutes of compiling.
    wrong = [slots for slots in [*ns.compiled_slots, *ns.doomed_slots] if slots[2] != 1]
    if ns.compile == "cudagraphs" and wrong:
        raise SystemExit("--compile cudagraphs needs one Action slot, got --compiled-slots "
                         + " ".join(",".join(map(str, slots)) for slots in wrong))


class _Suite:
    """The three groups on one backend; each group's failure is recorded, not fatal."""

    def __init__(self, ns: argparse.Namespace, backend: Backend,
                 report: dict[str, Any]) -> None:
        self.ns, self.backend, self.report = ns, backend, report
        self.runs: list[EngineReport] = []
        self.out = ns.out / "engine_bench.json"

    def write(self) -> None:
        _write(self.out, self.report, self.runs)

    def group(self, name: str, body: Callable[[], None]) -> bool:
        """Run one group; on an exception record it under ``errors`` and go on."""
        try:
            body()
        except Exception as exc:  # a later group must still run (one device lease)
            self.report.setdefault("errors", {})[name] = f"{type(exc).__name__}: {exc}"
            # The whole traceback: a bare assertion inside torch names nothing by itself.
            self.report.setdefault("tracebacks", {})[name] = traceback.format_exc()
            print(f"[suite] group {name} failed: {self.report['errors'][name]}\n"
                  f"{self.report['tracebacks'][name]}", flush=True)
            self.write()
            return False
        return True

    def calibrated(self, max_batch: int, tag: str,
                   lanes: tuple[int, int, int] = DEFAULT_CALIB_BOUNDS) -> Path:
        calib = _calibrate(self.backend, self.ns, max_batch, tag, lanes)
        self.report["calibration"].append({**calib, "table": calib["table"].name})
        self.report["steps"]["calibrate_s"] = sum(
            c["seconds"] for c in self.report["calibration"])
        self.write()
        path: Path = calib["table"]
        return path

    def bench(self, robots: int, label: str, engine: str, table: Path, *,
              slots: tuple[int, int, int] | None = None, max_batch: int = 1,
              interleave: float = 0.0, shed_doomed: bool = False) -> None:
        args = _bench_args(self.ns, robots, engine, table, "torch", slots=slots,
                           max_batch=max_batch)
        args.shed_doomed = shed_doomed
        if interleave > 0:
            args.policy = "xinfer_batch_switch"
            args.interleave, args.interleave_arms = interleave, ("off", "on", "auto")
            args.interleave_settle = interleave / 4
            args.duration = (self.ns.warmup
                             + self.ns.interleave_cycles * len(args.interleave_arms) * interleave)
        t0 = time.perf_counter()
        rep = bench_engine.run_benchmark(args, self.backend)
        rep.wall_s, rep.arm = time.perf_counter() - t0, label
        self.runs.append(rep)
        m = rep.metrics
        print(f"[bench] robots={robots} engine={label} qps={m.throughput_rps:.2f} "
              f"p50={m.latency_p50_ms:.1f} p95={m.latency_p95_ms:.1f} "
              f"attain={m.attainment * 100:.1f}% pred_mae="
              f"{rep.prediction.get('mae_ms', float('nan')):.2f} ms", flush=True)
        if rep.interleave is not None:
            print("\n".join(rep.interleave.lines()), flush=True)
        self.write()  # a suite cut short by its timeout keeps what it ran

    def compiled(self) -> None:
        """Group 1: the Action loop compiled, on its own table and slots."""
        ns = self.ns
        try:
            self.report["steps"]["compile_s"] = self.backend.set_compile(ns.compile)
        except Exception as exc:
            self.report["compile_error"] = f"{type(exc).__name__}: {exc}"
            raise
        print(f"[suite] Action loop compiled ({ns.compile}) in "
              f"{self.report['steps']['compile_s']:.1f} s", flush=True)
        try:
            # As many units side by side as the widest layout runs (the predictor
            # cannot see a lane past its table's bounds: StageEngine warns of it).
            layouts = [*ns.compiled_slots, *ns.doomed_slots]
            widest = (max(slots[0] for slots in layouts), max(slots[1] for slots in layouts),
                      max(slots[2] for slots in layouts))
            table = self.calibrated(1, f"_{ns.compile}", widest)
            for robots in ns.robots:
                for engine in ns.engines:
                    # Serial runs one unit at a time whatever the slots: once a count.
                    arms = ([(slots, False) for slots in ns.compiled_slots]
                            + [(slots, True) for slots in ns.doomed_slots]
                            if engine != "serial" else [(ns.compiled_slots[0], False)])
                    for slots, doomed in arms:
                        at = ("@" + ",".join(map(str, slots)) if len(arms) > 1 else "")
                        self.bench(robots, f"{engine}+compile-{ns.compile}{at}"
                                   + ("+shed-doomed" if doomed else ""), engine, table,
                                   slots=slots, shed_doomed=doomed)
        finally:
            self.backend.set_compile("off")

    def eager(self, robots: Sequence[int]) -> None:
        """Group 2: the eager Action loop, side by side with group 1."""
        table = self.calibrated(1, "")
        for count in robots:
            for engine in self.ns.engines:
                self.bench(count, engine, engine, table)

    def batched(self) -> None:
        """Group 3: eager, batched (a compiled step would compile once per batch size)."""
        ns = self.ns
        table = self.calibrated(ns.max_batch, f"_batch{ns.max_batch}")
        label = f"async+batch{ns.max_batch}" + ("-interleaved" if ns.interleave > 0 else "")
        for robots in ns.arm_robots:
            self.bench(robots, label, "async", table, slots=ns.batch_slots,
                       max_batch=ns.max_batch, interleave=ns.interleave)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the suite; returns the exit status (1 when a group failed)."""
    ns = build_parser().parse_args(argv)
    _settle(ns)
    ns.out.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {"dry_run": ns.dry_run, "host": platform.node(),
                              "python": sys.version.split()[0], "steps": {},
                              "calibration": []}
    t0 = time.perf_counter()
    backend = make_backend("torch", model=ns.model, device=ns.device, dtype=ns.dtype)
    report["backend"] = backend.describe()
    report["steps"]["build_s"] = time.perf_counter() - t0
    print(f"[suite] built {ns.model} on {ns.device} in {report['steps']['build_s']:.1f} s",
          flush=True)
    report["smoke"] = _smoke(backend)
    print(f"[suite] smoke ok: {report['smoke']}", flush=True)
    suite = _Suite(ns, backend, report)
    compiled = ns.compile != "off" and suite.group("compiled", suite.compiled)
    # Every robot count runs eager when the compiled group did not.
    eager_robots = ns.eager_robots if compiled else ns.robots
    if eager_robots:
        suite.group("eager", lambda: suite.eager(eager_robots))
    if ns.max_batch > 1 and ns.arm_robots:
        suite.group("batched", suite.batched)
    report["steps"]["total_s"] = time.perf_counter() - t0
    suite.write()
    print(f"[suite] wrote {suite.out} and {len(report['calibration'])} table(s) in "
          f"{report['steps']['total_s']:.1f} s", flush=True)
    backend.close()
    return 1 if report.get("errors") else 0


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
