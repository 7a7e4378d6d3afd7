"""Closed-loop service metrics: SLO attainment, on-time goodput, throughput, percentiles.

Shared by the simulator, the engine benchmark and the ROS recorder, so it only knows
about response records, never about who produced them. Conventions follow the paper
(§2.3, §6.1, Appendices B.1 and C.3-C.4):

* a request belongs to the measurement window by its *send* time, ``[start, end)``;
* responses that arrive after the window still count for requests sent inside it;
* attainment = on-time responses / requests sent in the window (an unanswered or
  failed request is a miss);
* goodput = on-time responses / window length; throughput = successful responses /
  window length;
* latency percentiles use successful responses only; ``answer_p50_ms`` and
  ``answer_p99_ms`` beside them count every answer, usable or not (a chunk, or a
  refusal: shed, rejected, failed), as the robot waited for it: a server that sheds
  looks fast on chunks alone.

Times are seconds on one clock; budgets are seconds too; reported latencies are ms.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field

import numpy as np

from xinfer_ros.core.constants import (
    ATTAINMENT_TARGET,
    COMMIT_LENGTH,
    HORIZON,
    KEYFRAME_SPACING,
    MEASUREMENT_WINDOW,
)

__all__ = [
    "DEFAULT_WINDOW",
    "HANDOFF_S",
    "STARVATION_S",
    "RecordArrays",
    "ResponseRecord",
    "RoundSummary",
    "WindowMetrics",
    "attainment_in_windows",
    "attainment_over_time",
    "nan_percentiles",
    "passes_attainment",
    "passes_latency",
    "summarize",
    "summarize_arrays",
    "summarize_rounds",
]

#: Measurement window by send time, seconds: 30 s warm-up, 180 s measured (App. C.3).
DEFAULT_WINDOW: tuple[float, float] = MEASUREMENT_WINDOW

_MS = 1000.0
_S_PER_HOUR = 3600.0
#: d·Δ: a response later than this after its send misses the RTC handoff: the robot has
#: executed past the committed prefix before the new chunk arrives (App. B.1).
HANDOFF_S: float = COMMIT_LENGTH * KEYFRAME_SPACING
#: H·Δ: a response later than this after its send (or none) leaves the robot without
#: actions: the previous chunk ran out before the new one arrived.
STARVATION_S: float = HORIZON * KEYFRAME_SPACING


@dataclass(frozen=True, slots=True)
class ResponseRecord:
    """One request as the client saw it.

    Attributes:
        send_time: Client send time ``s_j`` in seconds.
        response_time: Client receive time ``r_j`` in seconds, or ``None`` if no
            response arrived.
        budget: Response-time budget ``b_j`` in seconds.
        ok: Whether the response was a successful (usable) chunk.
        robot: Robot index, for per-robot analysis.
    """

    send_time: float
    response_time: float | None
    budget: float
    ok: bool = True
    robot: int = 0

    @property
    def latency(self) -> float:
        """Response latency ``r_j - s_j`` in seconds (``inf`` when unanswered)."""
        if self.response_time is None:
            return math.inf
        return self.response_time - self.send_time

    @property
    def on_time(self) -> bool:
        """Whether the request succeeded within its budget."""
        return self.ok and self.latency <= self.budget


@dataclass(frozen=True, slots=True)
class WindowMetrics:
    """Metrics of one measurement window (one round).

    Latencies are in ms; rates are per second of window length; attainments are
    fractions in [0, 1]. ``per_budget`` maps a budget in ms (as a string key, so the
    JSON form is stable) to that class's attainment.
    """

    requests: int
    responses: int
    errors: int
    on_time: int
    attainment: float
    goodput_rps: float
    throughput_rps: float
    latency_p50_ms: float
    latency_p95_ms: float
    latency_p99_ms: float
    latency_mean_ms: float
    mean_wide_latency_ms: float
    wide_budget_ms: float
    per_budget: dict[str, float] = field(default_factory=dict)
    per_budget_requests: dict[str, int] = field(default_factory=dict)
    #: Requests of the whole run, in the window or not, that never got a response.
    #: In the simulator, which drains in-flight work at the end, these are requests a
    #: policy starved; their robots (one request in flight, Eq. 1) sent nothing more,
    #: which lowers the load the others see, so a round with any fails (see
    #: :func:`passes_attainment`).
    unanswered: int = 0
    #: Control-loop cost: OK responses later than d·Δ after their send (:data:`HANDOFF_S`)
    #: and their share of the OK responses.
    handoff_violations: int = 0
    handoff_violation_rate: float = math.nan
    #: Requests answered later than H·Δ after their send, or not at all
    #: (:data:`STARVATION_S`), and the same per robot-hour of the window.
    starved: int = 0
    starved_per_robot_hour: float = math.nan
    #: Latency percentiles (ms) of every answered request, chunk or refusal (shed,
    #: rejected, failed): what a robot waits for, including answers without actions.
    answer_p50_ms: float = math.nan
    answer_p99_ms: float = math.nan

    def to_dict(self) -> dict[str, object]:
        """Return a JSON-ready dict with the metric names used in reports."""
        return asdict(self)


def _budget_key(budget_s: float) -> str:
    """Format a budget as a stable ms key (``"90"``, ``"122.5"``)."""
    return f"{budget_s * _MS:g}"


def nan_percentiles(values: np.ndarray, qs: Sequence[float]) -> list[float]:
    """Several percentiles in one pass (NaN each on an empty array)."""
    if values.size == 0:
        return [math.nan] * len(qs)
    return [float(v) for v in np.percentile(values, qs)]


def summarize(
    records: Iterable[ResponseRecord],
    window: tuple[float, float] = DEFAULT_WINDOW,
    wide_budget: float | None = None,
) -> WindowMetrics:
    """Summarise the records sent inside ``window``.

    Args:
        records: Client-side records of one run.
        window: ``[start, end)`` by send time, seconds.
        wide_budget: Budget (s) whose class is "wide" for the mean wide-budget latency;
            defaults to the largest budget seen in the window.

    Returns:
        The window's metrics.

    Raises:
        ValueError: If the window is empty or reversed.
    """
    start, end = window
    if not end > start:
        raise ValueError(f"measurement window must have end > start, got {window!r}")
    records = list(records)
    unanswered = sum(1 for r in records if r.response_time is None)
    sel = [r for r in records if start <= r.send_time < end]
    n = len(sel)
    return summarize_arrays(
        RecordArrays(
            send=np.fromiter((r.send_time for r in sel), float, n),
            latency=np.fromiter((r.latency for r in sel), float, n),
            budget=np.fromiter((r.budget for r in sel), float, n),
            ok=np.fromiter((r.ok and r.response_time is not None for r in sel), bool, n),
            robots=len({r.robot for r in sel})),
        window, wide_budget, unanswered=unanswered)


@dataclass(frozen=True, slots=True)
class RecordArrays:
    """The records of one window as columns (what :func:`summarize_arrays` reads).

    Attributes:
        send: send times ``s_j`` (s).
        latency: ``r_j − s_j`` (s); ``inf`` when unanswered.
        budget: budgets ``b_j`` (s).
        ok: a usable chunk arrived.
        robots: distinct robots among them.
    """

    send: np.ndarray
    latency: np.ndarray
    budget: np.ndarray
    ok: np.ndarray
    robots: int


def summarize_arrays(
    columns: RecordArrays,
    window: tuple[float, float],
    wide_budget: float | None = None,
    *,
    unanswered: int = 0,
) -> WindowMetrics:
    """:func:`summarize` on records already selected by ``window`` and held as columns.

    For callers that keep their records as arrays (the server's ledger), so that a
    summary costs no Python object per record.

    Args:
        columns: The window's records.
        window: ``[start, end)`` they were selected by (its length sets the rates).
        wide_budget: As for :func:`summarize`.
        unanswered: Requests of the whole run that never got a response.
    """
    start, end = window
    length = end - start
    n = len(columns.send)
    ok = columns.ok.astype(bool)
    lat = columns.latency
    bud = columns.budget
    on_time = ok & (lat <= bud)
    ok_lat_ms = lat[ok] * _MS
    answered_ms = lat[np.isfinite(lat)] * _MS
    per_budget: dict[str, float] = {}
    per_budget_n: dict[str, int] = {}
    for b in sorted(set(bud.tolist())):
        mask = bud == b
        per_budget[_budget_key(b)] = float(on_time[mask].mean())
        per_budget_n[_budget_key(b)] = int(mask.sum())
    wide = wide_budget if wide_budget is not None else (float(bud.max()) if n else math.nan)
    wide_mask = ok & (bud == wide)
    handoff = int((ok & (lat > HANDOFF_S)).sum())
    starved = int((lat > STARVATION_S).sum())  # unanswered: latency inf
    robots = columns.robots
    p50, p95, p99 = nan_percentiles(ok_lat_ms, (50, 95, 99))
    answer_p50, answer_p99 = nan_percentiles(answered_ms, (50, 99))
    return WindowMetrics(
        requests=n,
        responses=int(ok.sum()),
        errors=int(n - ok.sum()),
        on_time=int(on_time.sum()),
        attainment=float(on_time.mean()) if n else math.nan,
        goodput_rps=float(on_time.sum()) / length,
        throughput_rps=float(ok.sum()) / length,
        latency_p50_ms=p50,
        latency_p95_ms=p95,
        latency_p99_ms=p99,
        latency_mean_ms=float(ok_lat_ms.mean()) if ok_lat_ms.size else math.nan,
        mean_wide_latency_ms=(
            float(lat[wide_mask].mean() * _MS) if wide_mask.any() else math.nan
        ),
        wide_budget_ms=wide * _MS,
        per_budget=per_budget,
        unanswered=unanswered,
        per_budget_requests=per_budget_n,
        handoff_violations=handoff,
        handoff_violation_rate=handoff / float(ok.sum()) if ok.any() else math.nan,
        starved=starved,
        starved_per_robot_hour=(starved / (robots * length / _S_PER_HOUR)
                                if robots else math.nan),
        answer_p50_ms=answer_p50,
        answer_p99_ms=answer_p99,
    )


@dataclass(frozen=True, slots=True)
class RoundSummary:
    """Equally weighted mean, min and max of each scalar metric over rounds."""

    rounds: int
    mean: dict[str, float]
    minimum: dict[str, float]
    maximum: dict[str, float]

    def to_dict(self) -> dict[str, object]:
        """Return a JSON-ready dict."""
        return {"rounds": self.rounds, "mean": self.mean, "min": self.minimum,
                "max": self.maximum}


def summarize_rounds(rounds: Sequence[WindowMetrics]) -> RoundSummary:
    """Aggregate per-round metrics as the paper does: equally weighted round means.

    Per-budget attainments are aggregated as ``per_budget.<ms>`` keys.

    Raises:
        ValueError: If ``rounds`` is empty.
    """
    if not rounds:
        raise ValueError("summarize_rounds needs at least one round")
    columns: dict[str, list[float]] = {}
    for m in rounds:
        for key, value in asdict(m).items():
            if isinstance(value, dict):
                if key != "per_budget":
                    continue
                for b, v in value.items():
                    columns.setdefault(f"per_budget.{b}", []).append(float(v))
            else:
                columns.setdefault(key, []).append(float(value))
    mean = {k: float(np.nanmean(v)) if not np.all(np.isnan(v)) else math.nan
            for k, v in columns.items()}
    lo = {k: float(np.nanmin(v)) if not np.all(np.isnan(v)) else math.nan
          for k, v in columns.items()}
    hi = {k: float(np.nanmax(v)) if not np.all(np.isnan(v)) else math.nan
          for k, v in columns.items()}
    return RoundSummary(rounds=len(rounds), mean=mean, minimum=lo, maximum=hi)


def passes_attainment(metrics: WindowMetrics, target: float = ATTAINMENT_TARGET) -> bool:
    """Heterogeneous-budget criterion: at least ``target`` SLO attainment (§6.1).

    A run that left any request unanswered fails whatever its attainment: a starved
    robot stops sending, and its silence would otherwise count as spare capacity.
    """
    return (metrics.requests > 0 and metrics.unanswered == 0
            and metrics.attainment >= target)


def passes_latency(metrics: WindowMetrics, p50_limit_ms: float = 150.0) -> bool:
    """Uniform-budget criterion: P50 below the limit and zero request errors (§6.1)."""
    return (
        metrics.requests > 0
        and metrics.errors == 0
        and metrics.unanswered == 0
        and metrics.latency_p50_ms < p50_limit_ms
    )


def attainment_over_time(
    records: Iterable[ResponseRecord],
    bin_s: float = 2.0,
    window: tuple[float, float] = DEFAULT_WINDOW,
) -> tuple[np.ndarray, np.ndarray]:
    """Attainment in send-time bins (Figure 8(d) uses 2 s bins).

    Returns:
        ``(bin_starts, attainment)``; bins without requests hold NaN.
    """
    start, end = window
    edges = np.arange(start, end + 1e-9, bin_s)
    sel = [r for r in records if start <= r.send_time < end]
    send = np.fromiter((r.send_time for r in sel), float, len(sel))
    hit = np.fromiter((r.on_time for r in sel), float, len(sel))
    idx = np.clip(((send - start) // bin_s).astype(int), 0, max(len(edges) - 2, 0))
    n_bins = max(len(edges) - 1, 1)
    counts = np.bincount(idx, minlength=n_bins).astype(float)
    hits = np.bincount(idx, weights=hit, minlength=n_bins)
    with np.errstate(invalid="ignore", divide="ignore"):
        att = np.where(counts > 0, hits / counts, np.nan)
    return edges[:n_bins], att


def attainment_in_windows(
    records: Iterable[ResponseRecord],
    windows: Iterable[tuple[float, float]],
) -> float:
    """Attainment of the requests sent inside any of ``windows`` (``[start, end)``, s).

    §6.3 reports bursty arrivals over the 60-80 s and 120-140 s windows this way: one
    ratio over every request in the union, not a mean of per-window ratios.

    Returns:
        On-time share, or NaN when no request was sent in the windows.
    """
    spans = list(windows)
    hits = total = 0
    for r in records:
        if any(a <= r.send_time < b for a, b in spans):
            total += 1
            hits += bool(r.on_time)
    return hits / total if total else math.nan
