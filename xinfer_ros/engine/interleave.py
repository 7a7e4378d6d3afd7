"""Arms interleaved in one run: the saturation switch's mode pinned in turn.

On the CPU engine the host's speed drifts between minutes: the same command kept
15-25 points more or fewer requests in budget from one minute to the next
(docs/BENCHMARKS.md, section 5.3), more than the 2 points issue 28 asks the arms to
be told apart by, so arms that run one after another compare minutes as much as
arms. An interleaved run serves one fleet with one engine and rotates the mode of
the saturation switch (``XInferPolicy(saturation_switch=True)``) every few seconds:

- ``off``: pinned unsaturated, unbatched XInfer's launches on the lanes;
- ``on``: pinned saturated, lane batching's launches;
- ``auto``: the meter's own verdict, which it keeps measuring under every pin.

Each request counts for the arm of the segment it was sent in, once ``settle``
seconds of the segment have passed (the previous arm's queue has drained by then at
loads below saturation; past it a backlog carries over, onto every arm alike because
of the order below). Each cycle runs every arm once, and the cycles take the arms'
orders in turn from every permutation, so that each arm follows each other arm
equally often over a whole number of permutations. The arms are then compared cycle
by cycle: host drift slower than a cycle falls on both sides of each difference.

ROS-free; the segment clock runs on the engine's.
"""

from __future__ import annotations

import bisect
import itertools
import math
import statistics
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from xinfer_ros.core.metrics import ResponseRecord
from xinfer_ros.engine.clock import Clock
from xinfer_ros.engine.speed_adjust import (
    ArmRun,
    SpeedAdjustError,
    fit_common_slope,
    interval_verdict,
    student_t975,
)
from xinfer_ros.errors import XInferRosError

__all__ = [
    "MODES",
    "ArmFigures",
    "FitDifference",
    "InterleaveError",
    "InterleaveReport",
    "PairedDifference",
    "Segment",
    "SegmentPinner",
    "SegmentSpeedFit",
    "arm_labels",
    "check_settle",
    "interleaved_figures",
    "plan_segments",
]

#: The pin of each mode (None: the meter's own verdict).
MODES: dict[str, bool | None] = {"off": False, "on": True, "auto": None}


class InterleaveError(XInferRosError, ValueError):
    """An interleaved run cannot be planned as asked (the message says why)."""


@dataclass(frozen=True, slots=True)
class Segment:
    """One arm's turn: requests sent in ``[start + settle, end)`` count for it."""

    arm: str  # the arm's label (see arm_labels)
    mode: str  # its key in MODES
    cycle: int  # 0-based
    start: float  # s from the run's start, as the records' send times
    end: float


def arm_labels(modes: Sequence[str]) -> list[str]:
    """A label per arm: its mode, numbered from the second arm of a mode on (``off2``).

    Raises:
        InterleaveError: fewer than two arms, or a mode not in :data:`MODES`.
    """
    if len(modes) < 2:
        raise InterleaveError(f"interleaving needs two arms or more, got {list(modes)}")
    labels = []
    for i, mode in enumerate(modes):
        if mode not in MODES:
            raise InterleaveError(f"unknown interleaved arm {mode!r} (one of {', '.join(MODES)})")
        k = modes[:i].count(mode)
        labels.append(mode if k == 0 else f"{mode}{k + 1}")
    return labels


def plan_segments(modes: Sequence[str], start: float, end: float,
                  length: float) -> list[Segment]:
    """The segments of ``[start, end)``: whole cycles of one ``length`` s turn per arm.

    Cycle c runs the arms in the order of the (c mod n!)-th permutation of their
    positions (itertools order).

    Raises:
        InterleaveError: bad arms or length, a span that is not a whole number of
            cycles, or fewer than two cycles.
    """
    labels = arm_labels(modes)
    if not (length > 0 and math.isfinite(length)):
        raise InterleaveError(f"segment length must be a finite number > 0, got {length!r}")
    cycle = length * len(modes)
    cycles = (end - start) / cycle
    if not (math.isfinite(cycles) and abs(cycles - round(cycles)) < 1e-6 and cycles >= 1.5):
        raise InterleaveError(
            f"the measured span {end - start:g} s must be two or more whole cycles of "
            f"{len(modes)} arms x {length:g} s ({cycle:g} s each)")
    orders = list(itertools.permutations(range(len(modes))))
    out = []
    for c in range(round(cycles)):
        for k, i in enumerate(orders[c % len(orders)]):
            t = start + (c * len(modes) + k) * length
            out.append(Segment(labels[i], modes[i], c, t, t + length))
    return out


def check_settle(settle: float, length: float, name: str = "settle") -> None:
    """Refuse a settling time (``name`` in the message) not shorter than a segment.

    Raises:
        InterleaveError: ``settle`` outside ``[0, length)``.
    """
    if not 0.0 <= settle < length:
        raise InterleaveError(f"{name} must be in [0, {length:g}) s, got {settle:g}")


class SegmentPinner:
    """Pins each segment's mode at its start, on a thread of its own.

    Args:
        clock: the engine's clock.
        pin: sets the policy's pin (``XInferPolicy.pin_saturation``).
        segments: the plan, in time order.
        t0: engine time of the run's start (the segments' zero).
    """

    def __init__(self, clock: Clock, pin: Callable[[bool | None], None],
                 segments: Sequence[Segment], t0: float) -> None:
        self._clock = clock
        self._pin = pin
        self._segments = list(segments)
        self._t0 = t0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="xinfer-interleave",
                                        daemon=True)

    def start(self) -> None:
        """Start pinning (the run's own measurement before the first segment)."""
        self._thread.start()

    def stop(self) -> None:
        """Stop and hand the verdict back to the meter."""
        self._stop.set()
        self._thread.join()
        self._pin(None)

    def _run(self) -> None:
        for seg in [*self._segments, None]:
            at = self._t0 + (seg.start if seg is not None else self._segments[-1].end)
            if self._stop.wait(self._clock.wall(at - self._clock.now())):
                return
            self._pin(MODES[seg.mode] if seg is not None else None)


@dataclass(frozen=True, slots=True)
class ArmFigures:
    """One arm's requests over its counted time."""

    arm: str
    requests: int
    on_time: int
    seconds: float  # its segments' time after settling
    attainment: float  # on_time / requests (NaN without requests)
    goodput_rps: float  # on_time / seconds
    per_cycle: tuple[float, ...]  # attainment (%) in each cycle (NaN: no request)
    # The speed probe's median (matmul, ms) over the counted part of each cycle's segment
    # (NaN: no sample); empty without a probe.
    per_cycle_probe_ms: tuple[float, ...] = ()


@dataclass(frozen=True, slots=True)
class PairedDifference:
    """``arm − other`` in attainment points, cycle by cycle."""

    arm: str
    other: str
    cycles: int  # cycles where both arms had requests
    mean: float
    se: float  # standard error of the mean over the cycles
    # Half-width of the 95 % interval: Student's t at cycles - 1 degrees of freedom x se.
    half_width: float
    median: float
    verdict: str  # interval_verdict of that interval against -tolerance


@dataclass(frozen=True, slots=True)
class FitDifference:
    """``arm − other`` in attainment points at the segments' mean host speed."""

    arm: str
    other: str
    difference: float
    se: float  # its standard error from the fit
    half_width: float  # of the 95 % interval: Student's t at the fit's dof x se
    verdict: str  # interval_verdict of that interval against -tolerance


@dataclass(frozen=True, slots=True)
class SegmentSpeedFit:
    """The arms at one host speed: :func:`fit_common_slope` over the segments.

    The host's speed moves within seconds (:mod:`~xinfer_ros.engine.speed_probe`),
    faster than a cycle, so each segment is a run of its arm with its own probe time.
    """

    segments: int  # segments fitted (with requests and probe samples)
    slope: float  # points per unit of log(probe ms)
    raw_sd: float  # spread of the segments around their arm's mean, points
    residual_sd: float  # the same after the speed term
    dof: int
    # Every pair of the report's differences that the fit could compare.
    differences: tuple[FitDifference, ...]


@dataclass(frozen=True, slots=True)
class InterleaveReport:
    """The arms of one interleaved run."""

    segment_s: float
    settle_s: float
    cycles: int
    tolerance: float  # points
    arms: tuple[ArmFigures, ...]
    # Every later arm against every earlier one (in the order given).
    differences: tuple[PairedDifference, ...]
    # The same pairs at one host speed (None: no probe, or too few segments with one).
    speed_fit: SegmentSpeedFit | None = None

    def to_dict(self) -> dict[str, object]:
        """JSON-ready."""
        out: dict[str, object] = {
            "segment_s": self.segment_s, "settle_s": self.settle_s, "cycles": self.cycles,
            "tolerance": self.tolerance, "arms": [_asdict(a) for a in self.arms],
            "differences": [_asdict(d) for d in self.differences]}
        if self.speed_fit is not None:
            fit = self.speed_fit
            out["speed_fit"] = {
                "segments": fit.segments, "slope": fit.slope, "raw_sd": fit.raw_sd,
                "residual_sd": fit.residual_sd, "dof": fit.dof,
                "differences": [_asdict(d) for d in fit.differences]}
        return out

    def lines(self) -> list[str]:
        """The report as text."""
        out = [f"interleaved: {self.cycles} cycles of {len(self.arms)} x {self.segment_s:g} s "
               f"(first {self.settle_s:g} s of each segment not counted)"]
        for a in self.arms:
            cyc = " ".join(f"{x:5.1f}" for x in a.per_cycle)
            out.append(f"  {a.arm:6s} attainment {a.attainment * 100:5.1f}% "
                       f"({a.on_time}/{a.requests}) goodput {a.goodput_rps:5.2f}/s  "
                       f"cycles: {cyc}")
        for d in self.differences:
            out.append(f"  {d.arm} - {d.other}: {d.mean:+.2f} +- {d.half_width:.2f} points "
                       f"(95 %, t over {d.cycles} cycles; median {d.median:+.1f}); "
                       f"tolerance -{self.tolerance:g}: {d.verdict}")
        fit = self.speed_fit
        if fit is not None:
            out.append(f"  at one host speed ({fit.segments} segments, spread "
                       f"{fit.raw_sd:.1f} -> {fit.residual_sd:.1f} points):")
            out += [f"    {d.arm} - {d.other}: {d.difference:+.2f} +- {d.half_width:.2f} "
                    f"points (95 %, t at {fit.dof} dof); tolerance -{self.tolerance:g}: "
                    f"{d.verdict}" for d in fit.differences]
        return out


def _asdict(obj: ArmFigures | PairedDifference | FitDifference) -> dict[str, object]:
    return {name: getattr(obj, name) for name in obj.__slots__}


def interleaved_figures(records: Iterable[ResponseRecord], segments: Sequence[Segment],
                        settle: float, tolerance: float,
                        probe_ms: Sequence[float] | None = None) -> InterleaveReport:
    """Each arm's figures, and every pair's difference cycle by cycle and at one speed.

    Args:
        records: the run's client records (send times from the run's start).
        segments: the plan the run followed (:func:`plan_segments`).
        settle: seconds at each segment's start whose requests do not count.
        tolerance: points an arm may fall below another and still hold.
        probe_ms: the speed probe's median over the counted part of each segment, in
            the order of ``segments`` (NaN: no sample); None: no probe.

    Raises:
        InterleaveError: ``settle`` not shorter than a segment, or no segments.
    """
    if not segments:
        raise InterleaveError("no segments")
    length = segments[0].end - segments[0].start
    check_settle(settle, length)
    if probe_ms is not None and len(probe_ms) != len(segments):
        raise InterleaveError(f"{len(probe_ms)} probe times for {len(segments)} segments")
    arms = list(dict.fromkeys(seg.arm for seg in segments))
    cycles = max(seg.cycle for seg in segments) + 1
    # counts[arm][cycle] = [requests, on time]
    counts = {a: [[0, 0] for _ in range(cycles)] for a in arms}
    ordered = sorted(segments, key=lambda s: s.start)
    starts = [s.start for s in ordered]
    for rec in records:
        seg = _segment_of(rec.send_time, ordered, starts)
        if seg is None or rec.send_time < seg.start + settle:
            continue
        cell = counts[seg.arm][seg.cycle]
        cell[0] += 1
        cell[1] += rec.on_time
    speeds = {a: [math.nan] * cycles for a in arms}
    for seg, ms in zip(segments, probe_ms or (), strict=False):
        speeds[seg.arm][seg.cycle] = ms
    figures = []
    for a in arms:
        n = sum(c[0] for c in counts[a])
        ok = sum(c[1] for c in counts[a])
        seconds = sum(s.end - s.start - settle for s in segments if s.arm == a)
        figures.append(ArmFigures(
            a, n, ok, seconds, ok / n if n else math.nan, ok / seconds,
            tuple(c[1] / c[0] * 100 if c[0] else math.nan for c in counts[a]),
            tuple(speeds[a]) if probe_ms is not None else ()))
    pairs = [(later, earlier) for j, later in enumerate(figures) for earlier in figures[:j]]
    diffs = tuple(_difference(a, o, tolerance) for a, o in pairs)
    fit = _speed_fit(figures, pairs, tolerance) if probe_ms is not None else None
    return InterleaveReport(length, settle, cycles, tolerance, tuple(figures), diffs, fit)


def _speed_fit(figures: Sequence[ArmFigures], pairs: Sequence[tuple[ArmFigures, ArmFigures]],
               tolerance: float) -> SegmentSpeedFit | None:
    """The common-slope fit over the segments (None where it cannot be fitted)."""
    runs = [ArmRun(f.arm, att, ms) for f in figures
            for att, ms in zip(f.per_cycle, f.per_cycle_probe_ms, strict=True)
            if math.isfinite(att) and ms > 0]
    try:
        fit = fit_common_slope(runs)
    except SpeedAdjustError:
        return None
    t = student_t975(max(fit.dof, 1))
    out = []
    for a, o in pairs:
        try:
            diff, se = fit.difference(a.arm, o.arm)
        except SpeedAdjustError:  # an arm without a fitted segment
            continue
        out.append(FitDifference(a.arm, o.arm, diff, se, t * se,
                                 interval_verdict(diff, se, tolerance, t)))
    return SegmentSpeedFit(len(runs), fit.slope, fit.raw_sd, fit.residual_sd, fit.dof,
                           tuple(out))


def _segment_of(t: float, ordered: Sequence[Segment], starts: Sequence[float]) -> Segment | None:
    i = bisect.bisect_right(starts, t) - 1
    if i < 0 or t >= ordered[i].end:
        return None
    return ordered[i]


def _difference(arm: ArmFigures, other: ArmFigures, tolerance: float) -> PairedDifference:
    d = [x - y for x, y in zip(arm.per_cycle, other.per_cycle, strict=True)
         if not (math.isnan(x) or math.isnan(y))]
    if len(d) < 2:
        return PairedDifference(arm.arm, other.arm, len(d), math.nan, math.nan, math.nan,
                                math.nan, "undecided (too few cycles)")
    mean = statistics.fmean(d)
    se = statistics.stdev(d) / math.sqrt(len(d))
    t = student_t975(len(d) - 1)
    return PairedDifference(arm.arm, other.arm, len(d), mean, se, t * se,
                            statistics.median(d), interval_verdict(mean, se, tolerance, t))
