"""The regression report of a replay: recorded ("before") against replayed ("after").

Per robot and for all robots together: requests, SLO attainment, P50 and P99 latency
and status counts before and after; for chunks that answer the same request in both
runs, action differences (max abs, RMS). Only pairs whose observation stamps agree are
*comparable*: a deterministic model must reproduce their actions exactly, while a pair
that used other frames (a camera frame lost in transport, a different request time in
closed loop) may differ for that reason alone; those are counted, not compared.

Latency is measured on one clock per side: before, from the recorder's receipt of the
request to its receipt of the chunk (log times; the robot's header stamps run on
another clock, whose offset is reported per robot); after, the player's send to its
receipt. Requests are measured by their position on the recording's time
line, inside ``[warmup, duration - drain)``. A robot whose bag recorded no chunks (a
plain sensor bag, or a recorder that missed the server's answers) has no "before":
its before columns, deltas and the checks that need them are ``None`` (n/a), never
0 %. ROS-free.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import NamedTuple

import numpy as np

from xinfer_ros.bags.outcome import ReplayOutcome, SentLike
from xinfer_ros.bags.scan import RecordedChunk, RecordedRun, RobotTrack
from xinfer_ros.core.metrics import ResponseRecord, summarize
from xinfer_ros.core.timing import MS_PER_S

__all__ = ["LATE_S", "STATUS_NAMES", "ActionDiff", "Check", "Delta", "MismatchExample",
           "PlayerLateness", "ReplayReport", "RobotSection", "SideMetrics", "Thresholds",
           "TotalSection", "build_report", "format_report", "player_lateness"]

#: A JSON object as the report writes it.
JsonDict = dict[str, object]

#: A recorded message published this much behind its schedule counts as late: one
#: camera period at 10 Hz, after which the server may pick an older frame than recorded.
LATE_S = 0.1

STATUS_NAMES = {0: "ok", 1: "rejected", 2: "shed", 3: "error"}
STATUS_OK = 0
#: Observation mismatches listed by example in the report, per robot.
_MISMATCH_EXAMPLES = 10


@dataclass(frozen=True)
class Thresholds:
    """Limits that fail a replay (``None``: not checked).

    Attributes:
        max_attainment_drop: Largest allowed fall of attainment (fraction, 0.02 = 2
            points), per robot and overall.
        max_p50_increase_ms: Largest allowed rise of P50 latency (ms).
        max_p99_increase_ms: Largest allowed rise of P99 latency (ms).
        max_action_rms: Largest allowed RMS action difference over comparable pairs.
        max_action_abs: Largest allowed absolute action difference.
        require_identical: Every comparable pair identical, and at least one.
        max_obs_mismatch: Largest allowed fraction of pairs that used other observations.
        max_unanswered: Largest allowed fraction of replayed requests left unanswered.
    """

    max_attainment_drop: float | None = 0.02
    max_p50_increase_ms: float | None = None
    max_p99_increase_ms: float | None = None
    max_action_rms: float | None = None
    max_action_abs: float | None = None
    require_identical: bool = False
    max_obs_mismatch: float | None = None
    max_unanswered: float | None = None


def _before_records(track: RobotTrack, start_ns: int) -> list[ResponseRecord]:
    records = []
    for q in track.replayable:
        send = (q.log_ns - start_ns) / 1e9
        chunk = track.chunks.get(q.seq)
        if chunk is None:
            records.append(ResponseRecord(send, None, q.budget_ms / MS_PER_S, ok=False))
            continue
        # Both on the recorder's clock: the request's and the chunk's receipt.
        latency = (chunk.log_ns - q.log_ns) / 1e9
        records.append(ResponseRecord(send, send + latency, q.budget_ms / MS_PER_S,
                                      ok=chunk.status == STATUS_OK))
    return records


def _after_records(sent: Sequence[SentLike], answers: Mapping[int, RecordedChunk],
                   start_ns: int) -> list[ResponseRecord]:
    records = []
    for s in sent:
        send = (s.bag_ns - start_ns) / 1e9
        chunk = answers.get(s.seq)
        if chunk is None:
            records.append(ResponseRecord(send, None, s.budget_ms / MS_PER_S, ok=False))
        else:
            records.append(ResponseRecord(send, send + (chunk.log_ns - s.send_ns) / 1e9,
                                          s.budget_ms / MS_PER_S, ok=chunk.status == STATUS_OK))
    return records


def _statuses(seqs: list[int], answers: Mapping[int, RecordedChunk]) -> dict[str, int]:
    counts: Counter[str] = Counter()
    for seq in seqs:
        chunk = answers.get(seq)
        counts["unanswered" if chunk is None else
               STATUS_NAMES.get(chunk.status, str(chunk.status))] += 1
    return dict(counts)


def _reasons(answers: Mapping[int, RecordedChunk], limit: int = 5) -> dict[str, int]:
    # Digits vary per request (ages, sizes); without them equal causes count together.
    counts = Counter("".join("#" if ch.isdigit() else ch for ch in c.reason[:100])
                     for c in answers.values() if c.status != STATUS_OK)
    return dict(counts.most_common(limit))


@dataclass(frozen=True)
class SideMetrics:
    """One side (recorded or replayed) of a robot's requests in the window."""

    # Requests sent in the window.
    requests: int
    # Of those, answered with a chunk.
    responses: int
    # Of those, answered within their budget.
    on_time: int
    # on_time / requests (NaN: no requests).
    attainment: float
    # Latency of the chunks (ms; NaN: none).
    latency_p50_ms: float
    latency_p99_ms: float
    latency_mean_ms: float
    # Answers by status name, "unanswered" included.
    statuses: dict[str, int]

    def to_dict(self) -> JsonDict:
        """The report's entry."""
        return {**asdict(self), "statuses": dict(self.statuses)}


def _metrics(records: list[ResponseRecord], window: tuple[float, float],
             statuses: dict[str, int]) -> SideMetrics:
    m = summarize(records, window=window)
    return SideMetrics(requests=m.requests, responses=m.responses, on_time=m.on_time,
                       attainment=m.attainment, latency_p50_ms=m.latency_p50_ms,
                       latency_p99_ms=m.latency_p99_ms, latency_mean_ms=m.latency_mean_ms,
                       statuses=statuses)


def _in_window(send_s: float, window: tuple[float, float]) -> bool:
    return window[0] <= send_s < window[1]


@dataclass(frozen=True)
class MismatchExample:
    """A pair whose chunks used other observations, and how far each stream moved."""

    # The request's seq.
    seq: int
    # Per stream ("camera_<i>", "joint_states"; "cameras": a count that changed), the
    # replay's stamp minus the recording's (ms).
    shift_ms: dict[str, float]

    def to_dict(self) -> JsonDict:
        """The report's entry."""
        return {"seq": self.seq, "shift_ms": dict(self.shift_ms)}


@dataclass(frozen=True)
class ActionDiff:
    """Recorded against replayed actions of the chunks that answer the same request."""

    # OK pairs of equal shape.
    pairs: int
    # Of those, pairs that used the same observations.
    comparable: int
    # Of those, pairs with identical actions.
    identical: int
    # pairs - comparable.
    observation_mismatch: int
    # OK pairs whose action arrays differ in shape (or are empty).
    shape_mismatch: int
    # Every comparable pair identical, and at least one.
    all_identical: bool
    # Over comparable pairs (NaN: none).
    max_abs: float
    rms: float
    # Over every pair.
    max_abs_all_pairs: float
    rms_all_pairs: float
    # A few observation mismatches.
    mismatch_examples: list[MismatchExample]

    def to_dict(self) -> JsonDict:
        """The report's entry."""
        return {**{k: getattr(self, k) for k in self.__dataclass_fields__},
                "mismatch_examples": [m.to_dict() for m in self.mismatch_examples]}


@dataclass
class _ActionStats:
    pairs: int = 0
    comparable: int = 0
    identical: int = 0
    shape_mismatch: int = 0
    sq_sum: float = 0.0
    count: int = 0
    max_abs: float = 0.0
    sq_sum_all: float = 0.0
    count_all: int = 0
    max_abs_all: float = 0.0
    mismatches: list[MismatchExample] = field(default_factory=list)

    def add(self, before: RecordedChunk, after: RecordedChunk) -> None:
        if before.status != STATUS_OK or after.status != STATUS_OK:
            return
        if before.actions.shape != after.actions.shape or before.actions.size == 0:
            self.shape_mismatch += 1
            return
        self.pairs += 1
        diff = after.actions.astype(np.float64) - before.actions.astype(np.float64)
        sq, peak = float(np.sum(diff * diff)), float(np.max(np.abs(diff)))
        self.sq_sum_all += sq
        self.count_all += diff.size
        self.max_abs_all = max(self.max_abs_all, peak)
        if before.observations != after.observations:
            self._note_mismatch(before, after)
            return
        self.comparable += 1
        self.identical += int(np.array_equal(before.actions, after.actions))
        self.sq_sum += sq
        self.count += diff.size
        self.max_abs = max(self.max_abs, peak)

    def _note_mismatch(self, before: RecordedChunk, after: RecordedChunk) -> None:
        # A few examples tell whether a camera or the joint state differed, and by how
        # much; that separates lost frames from a regression in observation assembly.
        if len(self.mismatches) >= _MISMATCH_EXAMPLES:
            return
        streams = {f"camera_{i}": (a - b) / 1e6 for i, (b, a) in
                   enumerate(zip(before.image_stamps, after.image_stamps, strict=False))
                   if a != b}
        if len(before.image_stamps) != len(after.image_stamps):
            streams["cameras"] = float(len(after.image_stamps) - len(before.image_stamps))
        if before.state_stamp != after.state_stamp:
            streams["joint_states"] = (after.state_stamp - before.state_stamp) / 1e6
        self.mismatches.append(MismatchExample(before.seq, streams))

    def merge(self, other: _ActionStats) -> None:
        for name in ("pairs", "comparable", "identical", "shape_mismatch", "sq_sum", "count",
                     "sq_sum_all", "count_all"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.max_abs = max(self.max_abs, other.max_abs)
        self.max_abs_all = max(self.max_abs_all, other.max_abs_all)

    def summary(self) -> ActionDiff:
        nan = math.nan
        return ActionDiff(
            pairs=self.pairs, comparable=self.comparable, identical=self.identical,
            observation_mismatch=self.pairs - self.comparable,
            shape_mismatch=self.shape_mismatch,
            all_identical=self.comparable > 0 and self.identical == self.comparable,
            max_abs=self.max_abs if self.count else nan,
            rms=math.sqrt(self.sq_sum / self.count) if self.count else nan,
            max_abs_all_pairs=self.max_abs_all if self.count_all else nan,
            rms_all_pairs=(math.sqrt(self.sq_sum_all / self.count_all) if self.count_all
                           else nan),
            mismatch_examples=list(self.mismatches))


@dataclass(frozen=True)
class Delta:
    """Replayed minus recorded."""

    attainment: float
    latency_p50_ms: float
    latency_p99_ms: float


def _delta(before: SideMetrics | None, after: SideMetrics) -> Delta | None:
    if before is None:
        return None
    return Delta(attainment=after.attainment - before.attainment,
                 latency_p50_ms=after.latency_p50_ms - before.latency_p50_ms,
                 latency_p99_ms=after.latency_p99_ms - before.latency_p99_ms)


def _json_delta(delta: Delta | None) -> JsonDict | None:
    return None if delta is None else asdict(delta)


@dataclass(frozen=True)
class RobotSection:
    """One robot's comparison."""

    # Recorded (None: the bag recorded no chunks for it) and replayed.
    before: SideMetrics | None
    after: SideMetrics
    # Requests replayed, and those left unanswered.
    sent: int
    unanswered: int
    # Recorded requests before the first replayable one (context only).
    before_context: int
    # Its header stamps minus the recorder's log times (ms).
    clock_offset_ms: float
    actions: ActionDiff
    # The most common refusal reasons, recorded ("before") and replayed ("after").
    reasons: dict[str, dict[str, int]]
    # after - before (None without a before).
    delta: Delta | None

    def to_dict(self) -> JsonDict:
        """The report's entry."""
        return {"before": None if self.before is None else self.before.to_dict(),
                "after": self.after.to_dict(), "sent": self.sent,
                "unanswered": self.unanswered, "before_context": self.before_context,
                "clock_offset_ms": self.clock_offset_ms, "actions": self.actions.to_dict(),
                "reasons": {k: dict(v) for k, v in self.reasons.items()},
                "delta": _json_delta(self.delta)}


@dataclass(frozen=True)
class TotalSection:
    """All robots together."""

    # None when no robot has a before.
    before: SideMetrics | None
    after: SideMetrics
    sent: int
    unanswered: int
    actions: ActionDiff
    # The replay of only the robots that have a before, when some have none: what
    # delta and the checks compare.
    after_compared: SideMetrics | None
    delta: Delta | None

    @property
    def compared(self) -> SideMetrics:
        """The replayed side that the deltas and checks compare."""
        return self.after if self.after_compared is None else self.after_compared

    def to_dict(self) -> JsonDict:
        """The report's ``total`` entry."""
        out: JsonDict = {"before": None if self.before is None else self.before.to_dict(),
                         "after": self.after.to_dict(), "sent": self.sent,
                         "unanswered": self.unanswered, "actions": self.actions.to_dict()}
        if self.after_compared is not None:
            out["after_compared"] = self.after_compared.to_dict()
        out["delta"] = _json_delta(self.delta)
        return out


@dataclass(frozen=True)
class Check:
    """One threshold check."""

    # Its name (attainment_drop, action_rms, ...).
    check: str
    # A robot, or ALL.
    scope: str
    value: float
    limit: float
    passed: bool


def _robot_section(track: RobotTrack, sent: Sequence[SentLike],
                   answers: Mapping[int, RecordedChunk], start_ns: int,
                   window: tuple[float, float]
                   ) -> tuple[RobotSection, list[ResponseRecord], list[ResponseRecord],
                              _ActionStats]:
    before = _before_records(track, start_ns)
    after = _after_records(sent, answers, start_ns)
    before_seqs = [q.seq for q in track.replayable
                   if _in_window((q.log_ns - start_ns) / 1e9, window)]
    after_seqs = [s.seq for s in sent if _in_window((s.bag_ns - start_ns) / 1e9, window)]
    actions = _ActionStats()
    for seq, chunk in answers.items():
        if (recorded := track.chunks.get(seq)) is not None:
            actions.add(recorded, chunk)
    before_metrics = (_metrics(before, window, _statuses(before_seqs, track.chunks))
                      if track.chunks else None)
    after_metrics = _metrics(after, window, _statuses(after_seqs, answers))
    section = RobotSection(
        before=before_metrics, after=after_metrics, sent=len(sent),
        unanswered=sum(1 for s in sent if s.seq not in answers),
        before_context=len(track.requests) - len(track.replayable),
        clock_offset_ms=track.clock_offset_ns / 1e6, actions=actions.summary(),
        reasons={"before": _reasons(track.chunks), "after": _reasons(answers)},
        delta=_delta(before_metrics, after_metrics))
    return section, before if track.chunks else [], after, actions


class _Scope(NamedTuple):
    """What the checks read of a robot or of ALL."""

    before: SideMetrics | None
    after: SideMetrics
    delta: Delta | None
    actions: ActionDiff
    sent: int
    unanswered: int


def _check(checks: list[Check], name: str, scope: str, value: float,
           limit: float, *, higher_is_bad: bool = True) -> None:
    bad = (not math.isfinite(value)) or (value > limit if higher_is_bad else value < limit)
    checks.append(Check(check=name, scope=scope, value=value, limit=limit, passed=not bad))


def _run_checks(scopes: dict[str, _Scope], limits: Thresholds) -> list[Check]:
    checks: list[Check] = []
    for scope, sec in scopes.items():
        before = sec.before
        # Nothing recorded to compare against: the before-checks do not apply (n/a).
        if before is not None and limits.max_attainment_drop is not None \
                and before.requests:
            _check(checks, "attainment_drop", scope,
                   before.attainment - sec.after.attainment, limits.max_attainment_drop)
        if sec.delta is not None:
            for key, value, limit in (
                    ("latency_p50_ms", sec.delta.latency_p50_ms, limits.max_p50_increase_ms),
                    ("latency_p99_ms", sec.delta.latency_p99_ms, limits.max_p99_increase_ms)):
                if limit is not None:
                    _check(checks, f"{key}_increase", scope, value, limit)
        act = sec.actions
        if limits.max_action_rms is not None:
            _check(checks, "action_rms", scope, act.rms, limits.max_action_rms)
        if limits.max_action_abs is not None:
            _check(checks, "action_max_abs", scope, act.max_abs, limits.max_action_abs)
        if limits.require_identical:
            _check(checks, "actions_identical", scope, float(act.all_identical), 1.0,
                   higher_is_bad=False)
        if limits.max_obs_mismatch is not None:
            frac = act.observation_mismatch / act.pairs if act.pairs else 0.0
            _check(checks, "observation_mismatch", scope, frac, limits.max_obs_mismatch)
        if limits.max_unanswered is not None:
            frac = sec.unanswered / sec.sent if sec.sent else 1.0
            _check(checks, "unanswered", scope, frac, limits.max_unanswered)
    return checks


@dataclass(frozen=True)
class PlayerLateness:
    """How far the player published behind the recording's schedule."""

    # Recorded messages published.
    messages: int
    # Their lateness (ms; None: no messages).
    p50_ms: float | None
    p99_ms: float | None
    max_ms: float | None
    # Messages later than late_after_ms.
    late: int
    late_after_ms: float


@dataclass
class ReplayReport:
    """The regression report of one replay."""

    # The run's settings as the caller gives them (mode, rate, server, ...): first in
    # the JSON.
    info: JsonDict
    # The bag: its path, storage, whether it was salvaged, its length (s).
    bag: str
    storage: str
    salvaged: bool
    duration_s: float
    # Requests sent in [start, end) s of the recording were measured.
    window_s: tuple[float, float]
    warnings: list[str]
    # Messages that could not be read, by reason; why reading stopped (None: it did not).
    skipped_messages: dict[str, int]
    read_error: str | None
    # Message types whose definition in the bag differs from this build's.
    schema_changes: list[JsonDict]
    # Messages published per topic kind, the largest publication delay (s).
    published: dict[str, int]
    max_lag_s: float
    player: PlayerLateness
    # Answers to a seq already answered; whether the replay was stopped early.
    duplicates: int
    stopped_early: bool
    robots: dict[str, RobotSection]
    total: TotalSection
    checks: list[Check]
    thresholds: Thresholds
    # Why the replay did not run to its end (None: it did); set by the runner.
    error: str | None = None
    # Where the figure was written; set by the runner.
    figure: str | None = None

    @property
    def passed(self) -> bool:
        """False when a check failed."""
        return all(c.passed for c in self.checks)

    def to_dict(self) -> JsonDict:
        """The JSON report, keys in the order xinfer-replay always wrote them."""
        out: JsonDict = {
            **self.info,
            "bag": self.bag, "storage": self.storage, "salvaged": self.salvaged,
            "duration_s": self.duration_s, "window_s": list(self.window_s),
            "warnings": list(self.warnings), "skipped_messages": dict(self.skipped_messages),
            "read_error": self.read_error, "schema_changes": list(self.schema_changes),
            "published": dict(self.published), "max_lag_s": self.max_lag_s,
            "player": asdict(self.player), "duplicates": self.duplicates,
            "stopped_early": self.stopped_early,
            "robots": {name: sec.to_dict() for name, sec in self.robots.items()},
            "total": self.total.to_dict(), "checks": [asdict(c) for c in self.checks],
            "thresholds": asdict(self.thresholds), "passed": self.passed,
            "error": self.error,
        }
        if self.figure is not None:
            out["figure"] = self.figure
        return out


def build_report(run: RecordedRun, result: ReplayOutcome, limits: Thresholds, *,
                 warmup_s: float = 0.0, drain_s: float = 0.5,
                 info: JsonDict | None = None) -> ReplayReport:
    """The regression report of one replay.

    Args:
        run: The scanned bag.
        result: The player's :class:`~xinfer_ros.nodes.bag_player.PlayResult`.
        limits: Thresholds that fail the replay.
        warmup_s: Requests in the first ``warmup_s`` of the recording are not measured.
        drain_s: Nor those in its last ``drain_s`` (their recorded answers may be cut).
        info: Extra fields for the report (mode, server, ...).

    Returns:
        The report; ``passed`` is false when a check failed.
    """
    end = max(warmup_s + 1e-3, run.duration_s - drain_s)
    window = (warmup_s, end)
    sections: dict[str, RobotSection] = {}
    before_all: list[ResponseRecord] = []
    after_all: list[ResponseRecord] = []
    actions_all = _ActionStats()
    statuses_before: Counter[str] = Counter()
    statuses_after: Counter[str] = Counter()
    recorded = False
    after_compared: list[ResponseRecord] = []  # the replay of robots that have a before
    for name, track in run.robots.items():
        sec, before, after, actions = _robot_section(
            track, result.sent.get(name, []), result.chunks.get(name, {}), run.start_ns, window)
        sections[name] = sec
        before_all += before
        after_all += after
        actions_all.merge(actions)
        if sec.before is not None:
            recorded = True
            after_compared += after
            statuses_before.update(sec.before.statuses)
        statuses_after.update(sec.after.statuses)
    total_before = _metrics(before_all, window, dict(statuses_before)) if recorded else None
    total_after = _metrics(after_all, window, dict(statuses_after))
    # ALL's deltas and checks compare like with like: only robots with a before.
    compared = None
    if recorded and len(after_compared) != len(after_all):
        compared = _metrics(after_compared, window, {})
    total = TotalSection(
        before=total_before, after=total_after,
        sent=sum(s.sent for s in sections.values()),
        unanswered=sum(s.unanswered for s in sections.values()),
        actions=actions_all.summary(), after_compared=compared,
        delta=_delta(total_before, compared or total_after))
    scopes = {name: _Scope(s.before, s.after, s.delta, s.actions, s.sent, s.unanswered)
              for name, s in sections.items()}
    scopes["ALL"] = _Scope(total.before, total.compared, total.delta, total.actions,
                           total.sent, total.unanswered)
    checks = _run_checks(scopes, limits)
    player = player_lateness(result.lags_s)
    late = _lateness_warning(player)
    return ReplayReport(
        info=dict(info or {}),
        bag=str(run.source.path), storage=run.source.storage,
        salvaged=run.source.salvaged, duration_s=run.duration_s,
        window_s=window, warnings=[*run.warnings, *([late] if late else [])],
        skipped_messages=run.skipped, read_error=run.source.read_error,
        schema_changes=[change.to_dict() for change in run.schema_changes],
        published=dict(result.published), max_lag_s=result.max_lag_s,
        player=player, duplicates=result.duplicates, stopped_early=result.stopped,
        robots=sections, total=total, checks=checks, thresholds=limits)


def _pct(value: float | None) -> str:
    if value is None:
        return "n/a"
    return "-" if not math.isfinite(value) else f"{value * 100:.1f}%"


def _ms(value: float | None) -> str:
    if value is None:
        return "n/a"
    return "-" if not math.isfinite(value) else f"{value:.1f}"


def player_lateness(lags_s: Sequence[float]) -> PlayerLateness:
    """How far the player published behind the recording's schedule (ms), and how often.

    Args:
        lags_s: Per published recorded message, its publish time minus its due time.
    """
    if not lags_s:
        return PlayerLateness(messages=0, p50_ms=None, p99_ms=None, max_ms=None, late=0,
                              late_after_ms=LATE_S * MS_PER_S)
    lags = np.asarray(lags_s, dtype=float)
    return PlayerLateness(
        messages=int(lags.size), p50_ms=float(np.percentile(lags, 50)) * MS_PER_S,
        p99_ms=float(np.percentile(lags, 99)) * MS_PER_S,
        max_ms=float(lags.max()) * MS_PER_S, late=int((lags > LATE_S).sum()),
        late_after_ms=LATE_S * MS_PER_S)


def _lateness_warning(lateness: PlayerLateness) -> str | None:
    if not lateness.late:
        return None
    return (f"the player fell behind the recording: {lateness.late} of "
            f"{lateness.messages} messages published over {lateness.late_after_ms:.0f} "
            f"ms late, at most {lateness.max_ms:.0f} ms (P99 {lateness.p99_ms:.0f} ms); "
            "the server may have picked older observations than recorded")


def format_report(report: ReplayReport) -> str:
    """The report as a text table (per robot and ALL), followed by the checks."""
    head = (f"{'robot':<10}{'req b/a':>10}{'attain before':>15}{'after':>8}{'P50 b/a ms':>15}"
            f"{'P99 b/a ms':>15}{'actions same/cmp':>18}{'rms':>10}  statuses after")
    lines = [head, "-" * len(head)]
    rows: dict[str, tuple[SideMetrics | None, SideMetrics, ActionDiff]] = {
        name: (sec.before, sec.after, sec.actions) for name, sec in report.robots.items()}
    rows["ALL"] = (report.total.before, report.total.after, report.total.actions)
    for name, (b, a, act) in rows.items():
        # The before columns of a robot the bag recorded no chunks for: n/a.
        requests = "n/a" if b is None else b.requests
        rms = "-" if not math.isfinite(act.rms) else f"{act.rms:.2e}"
        lines.append(
            f"{name:<10}{requests:>5}/{a.requests:<4}"
            f"{_pct(None if b is None else b.attainment):>15}{_pct(a.attainment):>8}"
            f"{_ms(None if b is None else b.latency_p50_ms) + '/' + _ms(a.latency_p50_ms):>15}"
            f"{_ms(None if b is None else b.latency_p99_ms) + '/' + _ms(a.latency_p99_ms):>15}"
            f"{str(act.identical) + '/' + str(act.comparable):>18}{rms:>10}"
            f"  {a.statuses}")
    total = report.total.actions
    lines.append(f"action pairs: {total.pairs}, comparable (same observations): "
                 f"{total.comparable}, identical: {total.identical}"
                 + ("  -> actions match exactly" if total.all_identical else ""))
    player = report.player
    if player.messages:
        lines.append(f"player: {player.messages} recorded messages published, behind "
                     f"schedule P50 {player.p50_ms:.1f} ms, P99 {player.p99_ms:.1f} ms, "
                     f"max {player.max_ms:.1f} ms; {player.late} over "
                     f"{player.late_after_ms:.0f} ms late")
    for warning in report.warnings:
        lines.append(f"warning: {warning}")
    for c in report.checks:
        mark = "ok  " if c.passed else "FAIL"
        lines.append(f"{mark} {c.check:<22}{c.scope:<10} value {c.value:.4g} "
                     f"limit {c.limit:.4g}")
    lines.append("PASSED" if report.passed else "REGRESSION: a threshold was crossed")
    return "\n".join(lines)
