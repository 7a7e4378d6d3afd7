"""``xinfer-bench engine``: closed-loop engine benchmark (async / serial / lockstep).

In-process robots (Eq. 1, T_E = 180 ms) drive the stage engine with budgets from the
simulator's workloads. Reports throughput, latency percentiles, SLO attainment,
goodput, per-stage server times, and the remaining-time prediction error of running
stages (App. C.2). With ``--backend emulated`` every line says it is emulation.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import os
import platform
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from xinfer_ros.cli.bench_compare import DEFAULT_TOLERANCE
from xinfer_ros.cli.engine_report import (
    CorrectedSimulation,
    EngineReport,
    PairRow,
    SimulatorRun,
)
from xinfer_ros.cli.torch_options import add_torch_arguments, make_torch_backend, stage_counts
from xinfer_ros.core.batch_cost import BatchCost
from xinfer_ros.core.clients import Link
from xinfer_ros.core.constants import DEFAULT_SLOTS
from xinfer_ros.core.metrics import WindowMetrics, summarize
from xinfer_ros.core.policy import Policy
from xinfer_ros.core.rate_table import RateTable, resolve_rate_table, write_rate_table
from xinfer_ros.core.registry import policy_names
from xinfer_ros.core.saturation import SaturationSummary
from xinfer_ros.core.timing import MS_PER_S
from xinfer_ros.core.xinfer_policy import XInferPolicy, batch_former
from xinfer_ros.engine.affinity import pin_thread
from xinfer_ros.engine.backends import BACKENDS, EMULATION_NOTICE, Backend, make_backend
from xinfer_ros.engine.batching import BatchSizes
from xinfer_ros.engine.clock import Clock
from xinfer_ros.engine.closed_loop import ClosedLoopRun, run_closed_loop
from xinfer_ros.engine.engine import StageEngine
from xinfer_ros.engine.interleave import (
    MODES,
    InterleaveError,
    Segment,
    SegmentPinner,
    check_settle,
    interleaved_figures,
    plan_segments,
)
from xinfer_ros.engine.lateness import PARTS, lateness
from xinfer_ros.engine.speed_probe import PROBE_PERIOD_S, SpeedProbe, SpeedSummary
from xinfer_ros.engine.types import (
    TABLE6,
    EngineConfig,
    ExecMode,
    Overflow,
    ablation_config,
    mode_config,
)

__all__ = [
    "add_arguments",
    "build_engine",
    "run",
    "run_benchmark",
    "run_pairs",
    "simulate_same",
    "stage_summary",
]

#: Slots of the torch backend on a CPU (one intra-op thread per lane): one ViT, one
#: Prefill and two Action lanes fit a 2-core machine best in our runs (the tiny
#: model's Action dominates; more lanes only time-share the cores).
CPU_SLOTS: tuple[int, int, int] = (1, 1, 2)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the ``engine`` sub-command's options."""
    from xinfer_ros.sim.workloads import WORKLOADS

    parser.add_argument("--backend", choices=BACKENDS, default="emulated")
    add_torch_arguments(parser)
    parser.add_argument("--robots", type=int, default=8)
    parser.add_argument("--engine", choices=[m.value for m in ExecMode], default="async")
    parser.add_argument("--ablation", choices=list(TABLE6), default=None,
                        help="Table 6 switch set (overrides --engine's switches)")
    parser.add_argument("--policy", choices=policy_names(), default="xinfer")
    parser.add_argument("--workload", choices=WORKLOADS, default="phases")
    parser.add_argument("--budgets-ms", type=float, nargs="+", default=None,
                        help="budgets of the uniform/custom workloads")
    parser.add_argument("--duration", type=float, default=60.0, help="last send time (s)")
    parser.add_argument("--warmup", type=float, default=None,
                        help="measurement starts here (s); default min(30, duration/4)")
    parser.add_argument("--slots", type=stage_counts(), default=None,
                        help="V,P,A slots (default 4,4,6; torch on CPU 1,1,2)")
    parser.add_argument("--rate-table", type=Path, default=None,
                        help="rate table for the predictor and the emulated device")
    parser.add_argument("--max-live", type=int, default=None,
                        help="backpressure bound (default 2 x robots + 8)")
    parser.add_argument("--overflow", choices=[o.value for o in Overflow], default="reject")
    parser.add_argument("--cpu-workers", type=int, default=2)
    parser.add_argument("--time-scale", type=float, default=1.0,
                        help="emulated only: engine seconds per wall second")
    parser.add_argument("--noise", type=float, default=0.0,
                        help="emulated only: log-normal sigma of unit work")
    parser.add_argument("--prepare-ms", type=float, default=1.0,
                        help="emulated only: CPU preparation time (the simulator's cpu_prep)")
    parser.add_argument("--tick-ms", type=float, default=2.0, help="policy tick period (ms)")
    parser.add_argument("--no-rate-correction", dest="rate_correction", action="store_false",
                        help="predict with the calibrated rates only (no online correction "
                             "learned from completed units)")
    parser.add_argument("--shed-doomed", action="store_true",
                        help="also shed a waiting request once its predicted answer at the "
                             "present load is past its deadline (EngineConfig.shed_doomed)")
    parser.add_argument("--compare-sim", action="store_true",
                        help="also run the simulator on the same policy, workload, table, "
                             "seed and slots, and report its attainment")
    parser.add_argument("--save-table", type=Path, default=None, metavar="FILE",
                        help="write the rate table with the per-stage slowdown the engine "
                             "learned online in this run (W_s -> k_s W_s): a table "
                             "calibrated under this serving load, e.g. for xinfer-sim plan")
    parser.add_argument("--phase-spread", action="store_true",
                        help="release responses later than T_E at the phase-spreading time "
                             "(as the server's phase_spread); the simulator comparison too")
    parser.add_argument("--link-ms", type=float, default=2.0,
                        help="uplink and downlink delay each (ms); delta = 2 x this")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-batch", type=int, default=1, metavar="N",
                        help="most units of a stage run as one batched forward (torch "
                             "backend; default 1: no batching)")
    parser.add_argument("--pairs", type=int, default=0,
                        help="run this many alternating pairs of a baseline (--baseline) and "
                             "the --engine arm, and report per-pair and median throughput "
                             "ratios")
    parser.add_argument("--baseline", choices=("serial", "unbatched"), default="serial",
                        help="the pairs' baseline: serial = Table 6 All-Off, in-process "
                             "Action, unpinned (default); unbatched = this arm with "
                             "--max-batch 1 and --baseline-slots")
    parser.add_argument("--baseline-slots", type=stage_counts(), default=None,
                        help="V,P,A slots of the unbatched baseline (default: as --slots "
                             "defaults)")
    parser.add_argument("--baseline-rate-table", type=Path, default=None,
                        help="rate table of the unbatched baseline (default: --rate-table)")
    parser.add_argument("--arm", default=None, metavar="LABEL",
                        help="name this run's arm in the report (xinfer-bench compare groups "
                             "runs by it)")
    parser.add_argument("--no-speed-probe", dest="speed_probe", action="store_false",
                        help=f"do not time two fixed work units every {PROBE_PERIOD_S:g} s "
                             "beside the run (the host-speed covariate of xinfer-bench "
                             "compare)")
    parser.add_argument("--interleave", type=float, default=None, metavar="SECONDS",
                        help="with --policy xinfer_batch_switch: rotate the switch's mode "
                             "every SECONDS through --interleave-arms within this one run "
                             "and compare the arms cycle by cycle (the measured span, "
                             "duration - warmup, must be whole cycles)")
    parser.add_argument("--interleave-arms", type=_modes, default=("off", "on", "auto"),
                        metavar="LIST",
                        help=f"the arms, comma-separated, of {', '.join(MODES)}: pinned "
                             "unbatched, pinned batched, the meter's verdict (default "
                             "off,on,auto; a mode twice, e.g. off,off, is an A/A check)")
    parser.add_argument("--interleave-settle", type=float, default=1.0, metavar="SECONDS",
                        help="requests sent this long after a segment starts are the first "
                             "to count for its arm (default 1)")
    parser.add_argument("--json", type=Path, default=None, help="write the report here")


def _modes(text: str) -> tuple[str, ...]:
    """``--interleave-arms``: a comma-separated list of MODES keys."""
    return tuple(m.strip() for m in text.split(","))


def _segments(args: argparse.Namespace) -> list[Segment] | None:
    """The interleaved run's plan over the measured window (None: not interleaved).

    Raises:
        InterleaveError: the plan is impossible (see :func:`plan_segments`).
    """
    if args.interleave is None:
        return None
    window = _window(args)
    return plan_segments(args.interleave_arms, window[0], window[1], args.interleave)


def _pinner(engine: StageEngine, segments: list[Segment] | None,
            start: float) -> SegmentPinner | None:
    """Start pinning ``engine``'s switch by ``segments`` from engine time ``start``.

    Raises:
        InterleaveError: segments for a policy without a saturation switch.
    """
    if segments is None:
        return None
    policy = engine.policy
    if not (isinstance(policy, XInferPolicy) and policy.saturation_switch):
        raise InterleaveError(f"--interleave pins a saturation switch's mode: policy "
                              f"{policy.name!r} has none (use xinfer_batch_switch)")
    pinner = SegmentPinner(engine.clock, policy.pin_saturation, segments, start)
    pinner.start()
    return pinner


def _segment_speeds(probe: SpeedProbe | None, segments: Sequence[Segment], settle: float,
                    t0: float, scale: float) -> list[float] | None:
    """The probe's matmul median over the counted part of each segment (NaN: no sample).

    ``t0``: the wall clock (``time.monotonic``) at the run's start; ``scale``: engine
    seconds a wall second. None without a probe.
    """
    if probe is None:
        return None
    out = []
    for seg in segments:
        got = probe.summary(t0 + (seg.start + settle) / scale, t0 + seg.end / scale)
        out.append(got.matmul.median_ms if got is not None else math.nan)
    return out


def _window(args: argparse.Namespace) -> tuple[float, float]:
    """The measured window ``[warmup, duration)`` (s)."""
    duration = float(args.duration)
    warmup = float(args.warmup) if args.warmup is not None else min(30.0, duration / 4)
    return warmup, duration


def build_engine(args: argparse.Namespace, backend: Backend | None = None
                 ) -> tuple[StageEngine, Backend, RateTable]:
    """Backend, engine config and policy from parsed arguments (engine not started).

    Args:
        args: parsed ``engine`` options.
        backend: a prebuilt torch backend to reuse (building large models once).
    """
    table = resolve_rate_table(args.rate_table)
    clock = Clock(args.time_scale)
    if args.backend == "emulated":
        # The emulated device is cheap and bound to this run's clock: always fresh.
        backend = make_backend("emulated", table=table, clock=clock, noise=args.noise,
                               seed=args.seed, prepare_s=args.prepare_ms * 1e-3)
    elif backend is None:
        if args.time_scale != 1.0:
            raise SystemExit("--time-scale needs --backend emulated")
        backend = make_torch_backend(args)
    on_cpu = args.backend == "torch" and not str(args.device).startswith("cuda")
    slots = args.slots or (CPU_SLOTS if on_cpu else DEFAULT_SLOTS)
    max_live = args.max_live or 2 * args.robots + 8
    base = EngineConfig(slots=slots, max_live=max_live, overflow=Overflow(args.overflow),
                        cpu_workers=args.cpu_workers, tick_s=args.tick_ms * 1e-3,
                        rate_correction=getattr(args, "rate_correction", True),
                        delta=2 * args.link_ms * 1e-3,
                        phase_spread=bool(getattr(args, "phase_spread", False)),
                        max_batch=getattr(args, "max_batch", 1),
                        shed_doomed=bool(getattr(args, "shed_doomed", False)))
    config = (ablation_config(args.ablation, base) if getattr(args, "ablation", None)
              else mode_config(args.engine, base))
    note = config.action_worker_note(getattr(args, "action_processes", 0)) if on_cpu else None
    if note:
        print(f"note: {note}", file=sys.stderr)
    engine = StageEngine(backend, args.policy, config, rate_table=table, clock=clock)
    return engine, backend, table


def stage_summary(run: ClosedLoopRun, window: tuple[float, float]) -> dict[str, dict[str, float]]:
    """Mean / P50 / P95 of each per-stage server time (ms) over OK requests in ``window``."""
    rows = [s.result.timings for s in run.sent
            if s.result is not None and s.result.ok and window[0] <= s.send_time < window[1]]
    out: dict[str, dict[str, float]] = {}
    for name in ("queue_ms", "lane_ms", "prepare_ms", "vit_ms", "prefill_ms", "action_ms",
                 "output_ms", "total_ms"):
        vals = np.array([getattr(t, name) for t in rows], dtype=float)
        vals = vals[np.isfinite(vals)]
        key = name.removesuffix("_ms")
        out[key] = ({"mean": float(vals.mean()), "p50": float(np.percentile(vals, 50)),
                     "p95": float(np.percentile(vals, 95))} if vals.size else
                    {"mean": math.nan, "p50": math.nan, "p95": math.nan})
    return out


def run_benchmark(args: argparse.Namespace, backend: Backend | None = None) -> EngineReport:
    """Run one closed-loop benchmark and return its report.

    Args:
        args: parsed ``engine`` options.
        backend: a prebuilt torch backend to reuse (it is not closed afterwards).
    """
    from xinfer_ros.sim.workloads import build_workload

    window = _window(args)
    duration = window[1]
    segments = _segments(args)
    workload = build_workload(args.workload, args.robots, args.seed, budgets_ms=args.budgets_ms,
                              duration=duration, window=window)
    owned = backend is None
    # The engine's lane and worker threads inherit this thread's CPUs when they start.
    pin_thread(getattr(args, "main_cpus", None))
    engine, backend, table = build_engine(args, backend)
    link = Link(args.link_ms * 1e-3, args.link_ms * 1e-3)
    # Before close: a closed backend no longer reports its Action worker processes.
    described = backend.describe()
    probe = SpeedProbe() if args.speed_probe else None
    try:
        if probe is not None:
            probe.start()  # before the engine: the child's imports fall in the warm-up
        engine.start()
        try:
            start = engine.clock.now()
            engine.audit.keep_from = engine.batches.keep_from = \
                engine.batch_audit.keep_from = start + window[0]
            # not the drain after it
            engine.batches.keep_until = engine.batch_audit.keep_until = start + window[1]
            t0 = time.monotonic()
            pinner = _pinner(engine, segments, start)
            try:
                run = run_closed_loop(engine, workload.robots, backend.example_inputs,
                                      duration, link=link)
            finally:
                if pinner is not None:
                    pinner.stop()
        finally:
            engine.close(drain_timeout=2.0)
            if owned:
                backend.close()
    finally:
        if probe is not None:
            probe.stop()
    # The window is in engine seconds; the probe's clock is the wall's.
    scale = float(args.time_scale)
    speed: SpeedSummary | None = (
        probe.summary(t0 + window[0] / scale, t0 + window[1] / scale)
        if probe is not None else None)
    metrics = summarize(run.records, window)
    statuses: dict[str, int] = {}
    for s in run.sent:
        key = s.result.status.name if s.result is not None else "UNANSWERED"
        statuses[key] = statuses.get(key, 0) + 1
    stats = engine.stats()
    cost = _batch_cost(engine.policy)
    report = EngineReport(
        emulated=backend.emulated,
        notice=EMULATION_NOTICE if backend.emulated else "",
        backend=described,
        engine=args.engine if not getattr(args, "ablation", None) else args.ablation,
        config=engine.config.to_dict(),
        policy=args.policy,
        workload=args.workload,
        robots=len(workload.robots),
        duration_s=duration,
        window_s=window,
        rate_table=str(args.rate_table) if args.rate_table else "default",
        rate_table_provenance=table.provenance,
        time_scale=args.time_scale,
        phase_spread=engine.config.phase_spread,
        held=stats["held"],
        host=platform.node(),
        load_average=list(os.getloadavg()),
        metrics=metrics,
        stage_ms=stage_summary(run, window),
        prediction=engine.audit.summary(),
        rate_correction=(engine.rate_correction.summary()
                         if engine.rate_correction is not None else None),
        statuses=statuses,
        dispatcher={"decisions": stats["decisions"],
                    "decision_ms_total": stats["decision_ms_total"],
                    "fast_path_steps": stats["fast_path_steps"],
                    "fast_path_units": stats["fast_path_units"]},
        arm=args.arm,
        speed_probe=speed,
        batches=engine.batches.snapshot(),
        batch_audit=engine.batch_audit.summary() or None,
        batch_feedback=cost.feedback_summary() if cost is not None else None,
        batch_feedback_sizes=cost.size_factors() if cost is not None else None,
        lateness=lateness(run.sent, window),
        saturation=_saturation(engine.policy),
        interleave=(interleaved_figures(
            run.records, segments, args.interleave_settle, DEFAULT_TOLERANCE,
            _segment_speeds(probe, segments, args.interleave_settle, t0, scale))
            if segments is not None else None),
    )
    if args.compare_sim:
        factors = (tuple(engine.rate_correction.factors)
                   if engine.rate_correction is not None else None)
        report.simulator = simulate_same(args, engine.config, window, factors)
    return report


def simulate_same(args: argparse.Namespace, config: EngineConfig,
                  window: tuple[float, float],
                  factors: Sequence[float] | None = None) -> SimulatorRun:
    """The simulator's metrics for the same policy, workload, seed, table and lanes.

    With ``factors`` (the engine's learned per-stage slowdown k_s) other than 1, the
    simulator runs a second time on the table with ``W_s → k_s · W_s``, as the engine's
    predictor applied them (:attr:`SimulatorRun.corrected`).
    """
    base = _simulate_same(args, config, window,
                          str(args.rate_table) if args.rate_table else None)
    corrected = None
    if factors is not None and any(k != 1.0 for k in factors):
        table = serving_table(args, factors)
        with tempfile.TemporaryDirectory(prefix="xinfer-corrected-") as tmp:
            path = write_rate_table(table, Path(tmp) / "rate_table_corrected.json")
            corrected = CorrectedSimulation(table_factors(factors),
                                            _simulate_same(args, config, window, str(path)))
    return SimulatorRun(
        config="xinfer_ros.sim.engine_loop.SimConfig (same policy/workload/seed/table)",
        metrics=base, corrected=corrected)


def table_factors(factors: Sequence[float]) -> tuple[float, float, float]:
    """The learned per-stage factors k_s as plain floats (ViT, Prefill, Action)."""
    return (float(factors[0]), float(factors[1]), float(factors[2]))


def serving_table(args: argparse.Namespace, factors: Sequence[float]) -> RateTable:
    """The run's rate table with the slowdown the engine learned while serving.

    The predictor's own correction (``W_s -> k_s W_s``, interference pattern kept),
    written as a table; its provenance names the load it was learned under.
    """
    return resolve_rate_table(args.rate_table).with_work_scaled(
        table_factors(factors),
        f"learned online by xinfer-bench engine ({args.policy}, {args.workload}, "
        f"{args.robots} robots, {args.duration:g} s)")


def _simulate_same(args: argparse.Namespace, config: EngineConfig,
                   window: tuple[float, float], rate_table: str | None) -> WindowMetrics:
    from xinfer_ros.sim.engine_loop import SimConfig, simulate

    cfg = SimConfig(policy=args.policy, robots=args.robots, workload=args.workload,
                    seed=args.seed, duration=float(args.duration), window=window,
                    rate_table=rate_table,
                    noise=args.noise, cpu_prep=args.prepare_ms * 1e-3,
                    link_up=args.link_ms * 1e-3, link_down=args.link_ms * 1e-3,
                    tick=args.tick_ms * 1e-3, slots=config.effective_slots,
                    max_batch=config.max_batch,
                    budgets_ms=tuple(args.budgets_ms) if args.budgets_ms else None,
                    phase_spread=bool(getattr(args, "phase_spread", False)))
    return simulate(cfg).metrics


def _fmt(report: EngineReport) -> str:
    m = report.metrics
    pred = report.prediction
    prefix = f"{EMULATION_NOTICE} " if report.emulated else ""
    lines = [
        f"{prefix}engine={report.engine} policy={report.policy} "
        f"backend={report.backend['backend']} robots={report.robots} "
        f"workload={report.workload} window={list(report.window_s)}",
        f"{prefix}throughput={m.throughput_rps:.2f} req/s goodput={m.goodput_rps:.2f} "
        f"attainment={m.attainment * 100:.1f}% P50/P95/P99={m.latency_p50_ms:.1f}/"
        f"{m.latency_p95_ms:.1f}/{m.latency_p99_ms:.1f} ms requests={m.requests} "
        f"errors={m.errors}",
        f"{prefix}stage means (ms): " + " ".join(
            f"{k}={v['mean']:.2f}" for k, v in report.stage_ms.items()),
    ]
    if pred.get("samples"):
        lines.append(f"{prefix}running-stage prediction: samples={pred['samples']} "
                     f"MAE={pred['mae_ms']:.2f} ms mean error={pred['mean_error_ms']:+.2f} ms "
                     f"mean stage={pred['mean_stage_duration_ms']:.2f} ms "
                     f"(MAE/mean={pred['mae_rel_mean_stage'] * 100:.1f}%)")
        per = pred.get("per_stage", {})
        corr = report.rate_correction
        lines.append(f"{prefix}per stage MAE/mean error (ms): " + " ".join(
            f"{k}={v['mae_ms']:.1f}/{v['mean_error_ms']:+.1f}" for k, v in per.items())
            + (" rate correction k=" + ",".join(f"{f:.2f}" for f in corr["factors"])
               if corr else " rate correction off"))
    disp = report.dispatcher
    lines.append(f"{prefix}statuses: {report.statuses} decisions={disp['decisions']} "
                 f"({disp['decision_ms_total'] / max(disp['decisions'], 1) * 1e3:.0f} us each, "
                 f"{disp['decision_ms_total'] / 1e3 / report.duration_s * 100:.1f}% of the run; "
                 f"fast path: {disp.get('fast_path_units', 0)} units)")
    if report.simulator is not None:
        sm = report.simulator.metrics
        lines.append(f"{prefix}simulator (same policy/workload/seed): attainment="
                     f"{sm.attainment * 100:.1f}% throughput={sm.throughput_rps:.2f} "
                     f"P50={sm.latency_p50_ms:.1f} ms; engine - simulator = "
                     f"{(m.attainment - sm.attainment) * 100:+.1f} points")
        fix = report.simulator.corrected
        if fix is not None:
            lines.append(f"{prefix}simulator on the table with the engine's learned slowdown "
                         "k=" + ",".join(f"{k:.2f}" for k in fix.factors) + ": attainment="
                         f"{fix.metrics.attainment * 100:.1f}%; engine - that = "
                         f"{(m.attainment - fix.metrics.attainment) * 100:+.1f} points")
    if report.batches is not None:
        lines.append(f"{prefix}units per forward (forwards): " + " ".join(
            f"{stage}={BatchSizes.mean_size(counts):.2f} ({sum(counts.values())})"
            for stage, counts in report.batches.items()))
    if report.batch_audit is not None:
        lines.append(f"{prefix}formed batches, observed / predicted duration (median; "
                     "batches, lags to the lane's start + to the dispatcher): " + " ".join(
                         f"{stage}[{size}]={cell['ratio_median']:.2f} ({cell['batches']}, "
                         f"lags {cell['start_lag_ms']:.1f}+{cell['report_lag_ms']:.1f} ms)"
                         for stage, sizes in report.batch_audit.items()
                         for size, cell in sizes.items()))
    if report.batch_feedback is not None:
        lines.append(f"{prefix}batch-cost feedback c=" + ",".join(
            f"{c:.2f}" for c in report.batch_feedback["factors"]) + " from " + ",".join(
            str(n) for n in report.batch_feedback["samples"]) + " batches"
            + ("" if report.batch_feedback_sizes is None else "; by size " + " ".join(
                f"[{k}]=" + ",".join(f"{c:.2f}" for c in cs)
                for k, cs in report.batch_feedback_sizes.items())))
    if report.lateness is not None:
        lines.append(f"{prefix}late requests by budget, mean ms "
                     f"{'/'.join(PARTS)} (share of Action batched): " + "; ".join(
                         f"{b}: {row['late']} of {row['requests']} late "
                         + "/".join(f"{row['late_ms'][p]:.1f}" for p in PARTS)
                         + f" ({row['late_batched']:.0%}), on time "
                         + "/".join(f"{row['on_time_ms'][p]:.1f}" for p in PARTS)
                         + f" ({row['on_time_batched']:.0%})"
                         for b, row in report.lateness.items()))
    if report.saturation is not None:
        sat = report.saturation
        lines.append(f"{prefix}saturation switch: saturated {sat['saturated_share']:.0%} of "
                     f"the run, {sat['switches']} switches; last utilisation V/P/A "
                     + "/".join(f"{u:.2f}" for u in sat["utilisation"])
                     + f" at {sat['arrival_rate']:.1f} requests/s, unit ms "
                     + "/".join(f"{d * MS_PER_S:.1f}" for d in sat["unit_s"]))
    if report.speed_probe is not None:
        sp = report.speed_probe
        lines.append(f"{prefix}speed probe, CPU ms median (p10/p90) over {sp.samples} "
                     f"samples: matmul {sp.matmul.median_ms:.3f} ({sp.matmul.p10_ms:.3f}/"
                     f"{sp.matmul.p90_ms:.3f}) python {sp.python.median_ms:.3f} "
                     f"({sp.python.p10_ms:.3f}/{sp.python.p90_ms:.3f})")
    if report.interleave is not None:
        lines += [prefix + line for line in report.interleave.lines()]
    return "\n".join(lines)


def _baseline(args: argparse.Namespace) -> argparse.Namespace:
    """The pairs' baseline arm: serial (Table 6 All-Off) or the same arm unbatched."""
    base = copy.copy(args)
    if args.baseline == "unbatched":
        base.max_batch, base.slots = 1, args.baseline_slots
        base.rate_table = args.baseline_rate_table or args.rate_table
        return base
    base.engine, base.ablation, base.action_processes, base.max_batch = "serial", None, 0, 1
    # Serial runs one unit at a time; pinning would only take cores from its robots.
    base.main_cpus = base.action_cpus = None
    return base


def run_pairs(args: argparse.Namespace) -> dict[str, object]:
    """Alternate a baseline arm and the ``--engine`` arm ``args.pairs`` times.

    The serial baseline is the Table 6 All-Off engine, one unit at a time with Action
    in process (``--action-processes`` applies to the other arm only); the unbatched
    baseline is the same arm with ``max_batch`` 1 on ``--baseline-slots``. Every
    other option is the same. The order flips every pair (B,A / A,B / ...) so that a
    drift of the machine's load weighs on both arms alike. Each arm builds its torch
    backend once.

    Returns:
        ``{"baseline": ..., "pairs": [...], "median": {...}, "runs": [...]}``.
    """
    arms = {"baseline": _baseline(args), "other": args}
    backends: dict[str, Backend | None] = {"baseline": None, "other": None}
    rows: list[PairRow] = []
    runs: list[EngineReport] = []
    try:
        for i in range(args.pairs):
            order = ("baseline", "other") if i % 2 == 0 else ("other", "baseline")
            got: dict[str, EngineReport] = {}
            for arm in order:
                a = arms[arm]
                if a.backend == "torch" and backends[arm] is None:
                    backends[arm] = make_torch_backend(a)
                rep = run_benchmark(a, backends[arm])
                rep.pair, rep.arm = i + 1, arm
                runs.append(rep)
                got[arm] = rep
                print(_fmt(rep), flush=True)
            mb, mo = got["baseline"].metrics, got["other"].metrics
            row: PairRow = {
                "pair": i + 1, "order": list(order),
                "baseline_rps": mb.throughput_rps, "arm_rps": mo.throughput_rps,
                "ratio": mo.throughput_rps / mb.throughput_rps if mb.throughput_rps else math.nan,
                "baseline_p50_ms": mb.latency_p50_ms, "arm_p50_ms": mo.latency_p50_ms,
                "baseline_attainment": mb.attainment, "arm_attainment": mo.attainment,
                "load_average": got[order[-1]].load_average[0]}
            rows.append(row)
            print(f"[pair {i + 1}] {args.baseline}={row['baseline_rps']:.2f} "
                  f"{args.engine}={row['arm_rps']:.2f} req/s ratio={row['ratio']:.2f} P50 "
                  f"{row['baseline_p50_ms']:.0f}/{row['arm_p50_ms']:.0f} ms attainment "
                  f"{row['baseline_attainment']:.1%}/{row['arm_attainment']:.1%} "
                  f"load={row['load_average']:.1f}", flush=True)
    finally:
        for b in backends.values():
            if b is not None:
                b.close()

    def med(values: list[float]) -> float:
        return float(np.median(values))

    summary = {"pairs": len(rows), "ratio": med([r["ratio"] for r in rows]),
               "baseline_rps": med([r["baseline_rps"] for r in rows]),
               "arm_rps": med([r["arm_rps"] for r in rows]),
               "baseline_p50_ms": med([r["baseline_p50_ms"] for r in rows]),
               "arm_p50_ms": med([r["arm_p50_ms"] for r in rows]),
               "baseline_attainment": med([r["baseline_attainment"] for r in rows]),
               "arm_attainment": med([r["arm_attainment"] for r in rows]),
               "arm_p50_lower": sum(r["arm_p50_ms"] < r["baseline_p50_ms"] for r in rows)}
    print(f"[pairs] medians over {len(rows)}: {args.baseline}={summary['baseline_rps']:.2f} "
          f"{args.engine}={summary['arm_rps']:.2f} req/s, ratio={summary['ratio']:.2f} "
          f"(ratio of medians {summary['arm_rps'] / summary['baseline_rps']:.2f}); P50 "
          f"{summary['baseline_p50_ms']:.0f}/{summary['arm_p50_ms']:.0f} ms, "
          f"{args.engine} lower in {summary['arm_p50_lower']}/{len(rows)}", flush=True)
    return {"benchmark": "engine-pairs", "baseline": args.baseline, "pairs": rows,
            "median": summary, "runs": [r.to_dict() for r in runs]}


def run(args: argparse.Namespace) -> int:
    """Entry point of ``xinfer-bench engine``."""
    if args.robots < 1 or args.duration <= 0 or args.pairs < 0:
        print("robots must be >= 1, duration > 0 and pairs >= 0", file=sys.stderr)
        return 2
    if args.save_table is not None and (args.pairs or not args.rate_correction):
        print("--save-table writes what the online rate correction learned in one run: "
              "not with --pairs or --no-rate-correction", file=sys.stderr)
        return 2
    if args.interleave is not None:
        if args.pairs or args.compare_sim:
            print("--interleave compares arms within one run: not with --pairs or "
                  "--compare-sim", file=sys.stderr)
            return 2
        try:
            _segments(args)
            check_settle(args.interleave_settle, args.interleave, "--interleave-settle")
        except InterleaveError as exc:
            print(exc, file=sys.stderr)
            return 2
    if args.pairs:
        data = run_pairs(args)
    else:
        try:
            report = run_benchmark(args)
        except InterleaveError as exc:
            print(exc, file=sys.stderr)
            return 2
        print(_fmt(report))
        data = report.to_dict()
        if args.save_table is not None:
            assert report.rate_correction is not None  # on: checked above
            path = write_rate_table(serving_table(args, report.rate_correction["factors"]),
                                    args.save_table)
            print(f"wrote {path} (work scaled by the learned k)")
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(data, indent=1, default=str) + "\n", encoding="utf-8")
        print(f"wrote {args.json}")
    return 0


def _batch_cost(policy: Policy) -> BatchCost | None:
    """The batch costs of ``policy`` when it forms batches (their feedback is reported)."""
    former = batch_former(policy)
    return former.batch_cost if former is not None else None


def _saturation(policy: Policy) -> SaturationSummary | None:
    """What ``saturation_switch``'s meter read and decided; None for other policies."""
    return policy.saturation if isinstance(policy, XInferPolicy) else None
