"""Rate-table calibration by microbenchmark (paper App. C.1).

1. *Isolated* runs give each stage's work ``W_s`` (median in-lane duration of a unit
   alone), its issue overhead ``h_s`` (median hand-off latency from submission to the
   lane starting the unit) and the output time ``h_out``.
2. *Mixed* runs hold a concurrency combination ``n = (n_V, n_P, n_A)`` steady: one
   loop thread per unit, each restarting its stage as soon as the previous unit ends,
   on lanes set up exactly like the engine's (own CUDA stream per lane). For every
   stage with ``n_s >= 1`` the median duration ``d`` of units that ran entirely inside
   the measurement window gives ``ρ_s(n − e_s) = d_iso / d`` (isolated work divided by
   measured duration), where ``d_iso`` is an isolated reference measured right before
   the combination, so slow drifts of background load on a shared machine cancel.
   Rates are capped at 1 (noise cannot make concurrency faster than isolation).
3. Grid entries not measured (e.g. more same-stage neighbours than slots allow) are
   filled from a least-squares fit of ``1/ρ_s(m) − 1 = Σ_k α_sk m_k`` (α ≥ 0), the
   core's interference form; the file's ``model`` records which entries were measured.

The result is written with the core's :func:`~xinfer_ros.core.rate_table.write_rate_table`.
"""

from __future__ import annotations

import itertools
import logging
import platform
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone

import numpy as np

from xinfer_ros.core.batching import batch_sizes
from xinfer_ros.core.rate_table import RateTable
from xinfer_ros.core.stages import STAGES, Stage
from xinfer_ros.engine.backends.base import AnyBackend, StateFactory
from xinfer_ros.engine.lanes import LaneGroup, LaneInfo, group_of

__all__ = ["CalibrationResult", "CalibrationSettings", "calibrate", "combinations"]

_LOG = logging.getLogger("xinfer_ros.engine.calibration")

Vec3 = tuple[int, int, int]


@dataclass(frozen=True)
class CalibrationSettings:
    """How much to measure.

    Attributes:
        bounds: calibrated lookup bounds c of the written table (other units per stage).
        max_units: largest total number of concurrent units in a mixed combination.
        window_s: measurement window per combination (s).
        warmup_s: loop time discarded before each window (s).
        repeats: repetitions of each combination (medians are pooled).
        iso_repeats: isolated units per stage.
        reference_units: isolated units per stage run right before each combination
            as its reference (0: use the global isolated medians).
        max_batch: most units of a stage run as one batch (the engine's ``max_batch``).
        batch_factors: with ``max_batch`` above one, measure the combinations one unit
            per lane (an unbatched table's cells) and each stage's batch of k alone
            against one unit alone (f_s(k), :mod:`xinfer_ros.core.batch_cost`) instead
            of splitting each combination's units into batches.
    """

    bounds: Vec3 = (2, 2, 2)
    max_units: int = 4
    window_s: float = 0.5
    warmup_s: float = 0.15
    repeats: int = 1
    iso_repeats: int = 8
    reference_units: int = 3
    max_batch: int = 1
    batch_factors: bool = False

    def __post_init__(self) -> None:
        if self.max_batch < 1:
            raise ValueError(f"max_batch must be >= 1, got {self.max_batch!r}")
        if self.batch_factors and self.max_batch == 1:
            raise ValueError("batch_factors needs max_batch >= 2")


@dataclass
class CalibrationResult:
    """The table plus the raw measurements behind it."""

    table: RateTable
    isolated_ms: dict[str, float]
    measured: dict[Vec3, dict[str, float]] = field(default_factory=dict)
    elapsed_s: float = 0.0


def combinations(bounds: Vec3, max_units: int) -> list[Vec3]:
    """Concurrency combinations to run, smallest first.

    Every ``n`` with ``n_s <= c_s`` and ``1 <= Σ n <= max_units``. A same-stage
    neighbour count of ``c_s`` would need ``c_s + 1`` units of one stage, more than
    the engine's slots at the default bounds; those entries come from the fit.
    """
    out = [n for n in itertools.product(range(bounds[0] + 1), range(bounds[1] + 1),
                                        range(bounds[2] + 1)) if 1 <= sum(n) <= max_units]
    return sorted(out, key=lambda n: (sum(n), n))


def _lane_thread(backend: AnyBackend, stage: Stage, index: int,
                 body: Callable[[LaneInfo], None]) -> threading.Thread:
    def target() -> None:
        lane = LaneInfo(group_of(stage), index)
        backend.lane_setup(lane)
        body(lane)
    return threading.Thread(target=target, name=f"calib-{stage.name}-{index}", daemon=True)


def _isolated(backend: AnyBackend,
              settings: CalibrationSettings) -> tuple[list[float], list[float], float]:
    """Median isolated work W_s, issue overhead h_s (s) and output time h_out (s)."""
    fresh = backend.state_factory()
    work: list[float] = []
    over: list[float] = []
    for stage in STAGES:
        durations = _time_isolated(backend, fresh, stage, settings.iso_repeats + 1)
        handoffs: list[float] = []
        # Hand-off latency of a lane: submission to the unit's start in the lane thread.
        probe = LaneGroup("probe", 1, backend.lane_setup)
        probe.submit(time.perf_counter).result()
        for _ in range(settings.iso_repeats):
            t0 = time.perf_counter()
            handoffs.append(probe.submit(time.perf_counter).result() - t0)
        probe.shutdown()
        work.append(statistics.median(durations[1:]))  # first run warms caches
        over.append(statistics.median(handoffs))
    # Output processing on a finished state.
    outs: list[float] = []
    for _ in range(settings.iso_repeats):
        state = fresh(Stage.ACTION)
        backend.run_stage(Stage.ACTION, state, None)
        t0 = time.perf_counter()
        backend.finish(state)
        outs.append(time.perf_counter() - t0)
        backend.release(state)
    return work, over, statistics.median(outs)


def _time_isolated(backend: AnyBackend, fresh: StateFactory[object], stage: Stage,
                   units: int) -> list[float]:
    """Durations (s) of ``units`` back-to-back units of ``stage`` alone on a lane thread."""
    durations: list[float] = []

    def body(lane: LaneInfo) -> None:
        for _ in range(units):
            state = fresh(stage)
            t0 = time.perf_counter()
            backend.run_stage(stage, state, lane)
            durations.append(time.perf_counter() - t0)
            backend.release(state)

    th = _lane_thread(backend, stage, 0, body)
    th.start()
    th.join()
    return durations


def _reference(backend: AnyBackend, n: Vec3, units: int,
               pool: dict[int, list[float]]) -> list[float]:
    """Median isolated duration of each stage present in ``n`` (s), measured now.

    Every isolated duration is also appended to ``pool[stage]``.
    """
    fresh = backend.state_factory()
    out = [0.0, 0.0, 0.0]
    for stage in STAGES:
        if not n[stage]:
            continue
        durations = _time_isolated(backend, fresh, stage, units)
        out[stage] = statistics.median(durations)
        pool[stage].extend(durations)
    return out


def _mixed(backend: AnyBackend, n: Vec3, settings: CalibrationSettings) -> dict[int, list[float]]:
    """Durations of units that ran entirely inside the window, per stage."""
    fresh = backend.state_factory()
    stop = threading.Event()
    lock = threading.Lock()
    spans: dict[int, list[tuple[float, float]]] = {0: [], 1: [], 2: []}
    threads = []
    for stage in STAGES:
        for k, size in enumerate(batch_sizes(n[stage], settings.max_batch)):
            def body(lane: LaneInfo, stage: Stage = stage, size: int = size) -> None:
                while not stop.is_set():
                    states = [fresh(stage) for _ in range(size)]
                    t0 = time.perf_counter()
                    backend.run_batch(stage, states, lane)
                    t1 = time.perf_counter()
                    for state in states:
                        backend.release(state)
                    with lock:
                        spans[stage].extend([(t0, t1)] * size)
            threads.append(_lane_thread(backend, stage, k, body))
    start = time.perf_counter()
    for th in threads:
        th.start()
    w0 = start + settings.warmup_s
    w1 = w0 + settings.window_s
    time.sleep(max(w1 - time.perf_counter(), 0.0))
    stop.set()
    for th in threads:
        th.join()
    out: dict[int, list[float]] = {}
    for s in range(3):
        if not n[s]:
            continue
        inside = [b - a for a, b in spans[s] if a >= w0 and b <= w1]
        # Units longer than the window: fall back to those that started after warm-up.
        out[s] = inside or [b - a for a, b in spans[s] if a >= w0] or [b - a for a, b in spans[s]]
    return out


def _batch_factors(backend: AnyBackend, settings: CalibrationSettings) -> list[list[float]]:
    """f_s(k) for k = 1..max_batch: a batch of k alone over one unit alone, per stage.

    Medians of ``iso_repeats`` forwards after one discarded; made non-decreasing in k
    (a batch never costs less than a smaller one: a dip is the window's noise).
    """
    fresh = backend.state_factory()
    out: list[list[float]] = []
    for stage in STAGES:
        medians: list[float] = []
        for k in range(1, settings.max_batch + 1):
            durations: list[float] = []

            def body(lane: LaneInfo, stage: Stage = stage, k: int = k,
                     durations: list[float] = durations) -> None:
                for _ in range(settings.iso_repeats + 1):
                    states = [fresh(stage) for _ in range(k)]
                    t0 = time.perf_counter()
                    backend.run_batch(stage, states, lane)
                    durations.append(time.perf_counter() - t0)
                    for state in states:
                        backend.release(state)

            th = _lane_thread(backend, stage, 0, body)
            th.start()
            th.join()
            medians.append(statistics.median(durations[1:]))
        factors = [1.0]
        for m in medians[1:]:
            factors.append(max(factors[-1], m / medians[0]))
        out.append([round(f, 6) for f in factors])
    return out


def _fit_alpha(samples: list[tuple[Vec3, float]]) -> list[float]:
    """Non-negative least squares of ``1/ρ − 1 = α · m`` (coordinate clipping)."""
    if not samples:
        return [0.0, 0.0, 0.0]
    a = np.array([m for m, _ in samples], dtype=float)
    y = np.array([1.0 / r - 1.0 for _, r in samples], dtype=float)
    active = [0, 1, 2]
    alpha = np.zeros(3)
    for _ in range(3):
        sol, *_ = np.linalg.lstsq(a[:, active], y, rcond=None)
        alpha = np.zeros(3)
        alpha[active] = sol
        neg = [i for i in active if alpha[i] < 0]
        if not neg:
            break
        active = [i for i in active if i not in neg]
        if not active:
            alpha = np.zeros(3)
            break
    return [float(max(x, 0.0)) for x in alpha]


def calibrate(
    backend: AnyBackend,
    settings: CalibrationSettings | None = None,
    *,
    describe: str = "",
    progress: Callable[[str], None] | None = None,
) -> CalibrationResult:
    """Measure the backend and build a rate table.

    Args:
        backend: the backend to measure (torch or emulated).
        settings: how much to measure.
        describe: free text added to the table's provenance (model, device, ...).
        progress: called with one line per measured combination.

    Returns:
        The table and the raw measurements.

    Raises:
        ValueError: batches asked of a backend that runs units one at a time.
    """
    cfg = settings if settings is not None else CalibrationSettings()
    backend.check_max_batch(cfg.max_batch)
    say = progress or (lambda line: _LOG.info("%s", line))
    t_start = time.perf_counter()
    work, over, h_out = _isolated(backend, cfg)
    say("isolated (ms): " + " ".join(f"{s.short}={w * 1e3:.3f}+{h * 1e3:.3f}"
                                     for s, w, h in zip(STAGES, work, over, strict=True))
        + f" out={h_out * 1e3:.3f}")
    per_stage: dict[int, dict[Vec3, list[float]]] = {0: {}, 1: {}, 2: {}}
    iso_pool: dict[int, list[float]] = {0: [], 1: [], 2: []}
    measured: dict[Vec3, dict[str, float]] = {}
    combos = combinations(cfg.bounds, cfg.max_units)
    # With batch factors the cells are an unbatched table's: one unit per lane.
    mixed_cfg = replace(cfg, max_batch=1, batch_factors=False) if cfg.batch_factors else cfg
    for i, n in enumerate(combos):
        row: dict[str, float] = {}
        for _ in range(cfg.repeats):
            # A fresh isolated reference right before the combination: a machine whose
            # background load drifts (shared CPUs) then shifts both durations alike.
            ref = (_reference(backend, n, cfg.reference_units, iso_pool) if cfg.reference_units
                   else work)
            durs = _mixed(backend, n, mixed_cfg)
            for s, values in durs.items():
                others = (n[0] - (s == 0), n[1] - (s == 1), n[2] - (s == 2))
                if any(o > c for o, c in zip(others, cfg.bounds, strict=True)):
                    continue
                rho = min(ref[s] / statistics.median(values), 1.0) if sum(others) else 1.0
                per_stage[s].setdefault(others, []).append(rho)
                row[STAGES[s].short] = statistics.median(values) * 1e3
        measured[n] = row
        say(f"[{i + 1}/{len(combos)}] n={n} ms: " + " ".join(
            f"{k}={v:.2f}" for k, v in row.items()))
    rates, alphas, n_measured = _assemble(per_stage, cfg.bounds)
    factors = _batch_factors(backend, cfg) if cfg.batch_factors else None
    if factors is not None:
        say("batch factors f_s(1.." + str(cfg.max_batch) + "): " + " ".join(
            f"{s.short}={f}" for s, f in zip(STAGES, factors, strict=True)))
    # W_s from every isolated run of the calibration, not only the first burst: on a
    # shared machine one burst can fall into a load spike.
    for s in range(3):
        if len(iso_pool[s]) >= cfg.iso_repeats:
            work[s] = statistics.median(iso_pool[s] + [work[s]] * cfg.iso_repeats)
    provenance = (f"xinfer-calibrate on {platform.node()} ({platform.machine()}), "
                  f"{datetime.now(timezone.utc).strftime('%Y-%m-%dT%H:%M:%SZ')}, backend="
                  f"{backend.name} {describe}".strip())
    assumptions = (
        "Measured by xinfer_ros.engine.calibration (App. C.1): W_s = median isolated in-lane "
        "unit duration (pooled over the initial burst and every per-combination reference), "
        "h_s = median lane hand-off latency, h_out = median output processing; "
        f"rho_s(m) = isolated reference / median unit duration with m other units held "
        f"running, the reference re-measured before each combination ({cfg.reference_units} "
        f"units; 0 = global medians), capped at 1 (combinations up to {cfg.max_units} units, "
        f"{cfg.repeats} repeat(s), {cfg.window_s:.2f} s windows). "
        f"{n_measured} entries measured; the rest from the least-squares fit "
        "1/rho_s(m) - 1 = sum_k alpha[s][k] m_k (alpha >= 0). Rates hold for the lane setup "
        "used (threads per CPU lane / one CUDA stream per lane) and "
        + (f"one unit per lane; a batch of k <= {cfg.max_batch} costs f_s(k) W_s "
           "(settings.batch_factors: a batch alone over one unit alone, medians of "
           f"{cfg.iso_repeats})." if factors is not None else
           f"batches of up to {cfg.max_batch} unit(s) per lane."))
    recorded: dict[str, object] = {
        "bounds": list(cfg.bounds), "max_units": cfg.max_units, "window_s": cfg.window_s,
        "repeats": cfg.repeats, "iso_repeats": cfg.iso_repeats, "max_batch": cfg.max_batch}
    if factors is not None:
        recorded["batch_factors"] = {s.short: f for s, f in zip(STAGES, factors, strict=True)}
    table = RateTable.from_function(
        lambda s, m: rates[s][m], work=work, overhead=over, h_out=h_out, bounds=cfg.bounds,
        provenance=provenance, assumptions=assumptions,
        model={"form": "measured; missing entries 1 / (1 + sum_k alpha[s][k] * n_k)",
               "alpha_rows_stage_cols_V_P_A": alphas,
               "measured_entries": n_measured,
               "settings": recorded})
    iso = {s.short: w * 1e3 for s, w in zip(STAGES, work, strict=True)}
    iso["out"] = h_out * 1e3
    return CalibrationResult(table, iso, measured, time.perf_counter() - t_start)


def _assemble(per_stage: dict[int, dict[Vec3, list[float]]],
              bounds: Vec3) -> tuple[dict[int, dict[Vec3, float]], list[list[float]], int]:
    """Grid of rates: measured medians where available, the fitted form elsewhere."""
    grid = list(itertools.product(range(bounds[0] + 1), range(bounds[1] + 1),
                                  range(bounds[2] + 1)))
    rates: dict[int, dict[Vec3, float]] = {0: {}, 1: {}, 2: {}}
    alphas: list[list[float]] = []
    n_measured = 0
    for s in range(3):
        meas = {m: statistics.median(v) for m, v in per_stage[s].items()}
        alpha = _fit_alpha([(m, r) for m, r in meas.items() if sum(m) > 0])
        alphas.append(alpha)
        for m in grid:
            if sum(m) == 0:
                rates[s][m] = 1.0  # isolated execution defines the unit rate
            elif m in meas:
                rates[s][m] = meas[m]
                n_measured += 1
            else:
                rates[s][m] = 1.0 / (1.0 + sum(a * k for a, k in zip(alpha, m, strict=True)))
    return rates, alphas, n_measured

