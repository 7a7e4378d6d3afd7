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
from dataclasses import dataclass
from typing import Any

import numpy as np

from xinfer_ros.bags.scan import RecordedChunk, RecordedRun, RobotTrack
from xinfer_ros.core.metrics import ResponseRecord, summarize
from xinfer_ros.core.timing import MS_PER_S

__all__ = ["LATE_S", "STATUS_NAMES", "Thresholds", "build_report", "format_report",
           "player_lateness"]

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


def _after_records(sent: list[Any], answers: dict[int, RecordedChunk],
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


def _statuses(seqs: list[int], answers: dict[int, RecordedChunk]) -> dict[str, int]:
    counts: Counter[str] = Counter()
    for seq in seqs:
        chunk = answers.get(seq)
        counts["unanswered" if chunk is None else
               STATUS_NAMES.get(chunk.status, str(chunk.status))] += 1
    return dict(counts)


def _reasons(answers: dict[int, RecordedChunk], limit: int = 5) -> dict[str, int]:
    # Digits vary per request (ages, sizes); without them equal causes count together.
    counts = Counter("".join("#" if ch.isdigit() else ch for ch in c.reason[:100])
                     for c in answers.values() if c.status != STATUS_OK)
    return dict(counts.most_common(limit))


def _metrics(records: list[ResponseRecord], window: tuple[float, float],
             statuses: dict[str, int]) -> dict[str, Any]:
    m = summarize(records, window=window)
    return {"requests": m.requests, "responses": m.responses, "on_time": m.on_time,
            "attainment": m.attainment, "latency_p50_ms": m.latency_p50_ms,
            "latency_p99_ms": m.latency_p99_ms, "latency_mean_ms": m.latency_mean_ms,
            "statuses": statuses}


def _in_window(send_s: float, window: tuple[float, float]) -> bool:
    return window[0] <= send_s < window[1]


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
    mismatches: list[dict[str, Any]] | None = None

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
        if self.mismatches is None:
            self.mismatches = []
        if len(self.mismatches) >= _MISMATCH_EXAMPLES:
            return
        streams = {f"camera_{i}": (a - b) / 1e6 for i, (b, a) in
                   enumerate(zip(before.image_stamps, after.image_stamps, strict=False))
                   if a != b}
        if len(before.image_stamps) != len(after.image_stamps):
            streams["cameras"] = float(len(after.image_stamps) - len(before.image_stamps))
        if before.state_stamp != after.state_stamp:
            streams["joint_states"] = (after.state_stamp - before.state_stamp) / 1e6
        self.mismatches.append({"seq": before.seq, "shift_ms": streams})

    def merge(self, other: _ActionStats) -> None:
        for name in ("pairs", "comparable", "identical", "shape_mismatch", "sq_sum", "count",
                     "sq_sum_all", "count_all"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.max_abs = max(self.max_abs, other.max_abs)
        self.max_abs_all = max(self.max_abs_all, other.max_abs_all)

    def to_dict(self) -> dict[str, Any]:
        nan = math.nan
        return {
            "pairs": self.pairs, "comparable": self.comparable, "identical": self.identical,
            "observation_mismatch": self.pairs - self.comparable,
            "shape_mismatch": self.shape_mismatch,
            "all_identical": self.comparable > 0 and self.identical == self.comparable,
            "max_abs": self.max_abs if self.count else nan,
            "rms": math.sqrt(self.sq_sum / self.count) if self.count else nan,
            "max_abs_all_pairs": self.max_abs_all if self.count_all else nan,
            "rms_all_pairs": math.sqrt(self.sq_sum_all / self.count_all) if self.count_all
            else nan,
            "mismatch_examples": list(self.mismatches or []),
        }


def _robot_section(track: RobotTrack, sent: list[Any], answers: dict[int, RecordedChunk],
                   start_ns: int, window: tuple[float, float]) -> tuple[dict[str, Any], Any]:
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
    section = {
        "before": before_metrics,
        "after": after_metrics,
        "sent": len(sent),
        "unanswered": sum(1 for s in sent if s.seq not in answers),
        "before_context": len(track.requests) - len(track.replayable),
        "clock_offset_ms": track.clock_offset_ns / 1e6,
        "actions": actions.to_dict(),
        "reasons": {"before": _reasons(track.chunks), "after": _reasons(answers)},
    }
    section["delta"] = _delta(before_metrics, after_metrics)
    return section, (before if track.chunks else [], after, actions)


def _delta(before: dict[str, Any] | None, after: dict[str, Any]) -> dict[str, float] | None:
    if before is None:
        return None
    return {key: after[key] - before[key]
            for key in ("attainment", "latency_p50_ms", "latency_p99_ms")}


def _check(checks: list[dict[str, Any]], name: str, scope: str, value: float,
           limit: float, *, higher_is_bad: bool = True) -> None:
    bad = (not math.isfinite(value)) or (value > limit if higher_is_bad else value < limit)
    checks.append({"check": name, "scope": scope, "value": value, "limit": limit,
                   "passed": not bad})


def _run_checks(sections: dict[str, dict[str, Any]], limits: Thresholds) -> list[dict[str, Any]]:
    checks: list[dict[str, Any]] = []
    for scope, sec in sections.items():
        before = sec["before"]
        # Nothing recorded to compare against: the before-checks do not apply (n/a).
        if before is not None and limits.max_attainment_drop is not None \
                and before["requests"]:
            _check(checks, "attainment_drop", scope,
                   before["attainment"] - sec["after"]["attainment"], limits.max_attainment_drop)
        for key, limit in (("latency_p50_ms", limits.max_p50_increase_ms),
                           ("latency_p99_ms", limits.max_p99_increase_ms)):
            if limit is not None and before is not None:
                _check(checks, f"{key}_increase", scope, sec["delta"][key], limit)
        act = sec["actions"]
        if limits.max_action_rms is not None:
            _check(checks, "action_rms", scope, act["rms"], limits.max_action_rms)
        if limits.max_action_abs is not None:
            _check(checks, "action_max_abs", scope, act["max_abs"], limits.max_action_abs)
        if limits.require_identical:
            _check(checks, "actions_identical", scope, float(act["all_identical"]), 1.0,
                   higher_is_bad=False)
        if limits.max_obs_mismatch is not None:
            frac = act["observation_mismatch"] / act["pairs"] if act["pairs"] else 0.0
            _check(checks, "observation_mismatch", scope, frac, limits.max_obs_mismatch)
        if limits.max_unanswered is not None:
            frac = sec["unanswered"] / sec["sent"] if sec["sent"] else 1.0
            _check(checks, "unanswered", scope, frac, limits.max_unanswered)
    return checks


def build_report(run: RecordedRun, result: Any, limits: Thresholds, *, warmup_s: float = 0.0,
                 drain_s: float = 0.5, info: dict[str, Any] | None = None) -> dict[str, Any]:
    """The regression report of one replay.

    Args:
        run: The scanned bag.
        result: The player's :class:`~xinfer_ros.nodes.bag_player.PlayResult`.
        limits: Thresholds that fail the replay.
        warmup_s: Requests in the first ``warmup_s`` of the recording are not measured.
        drain_s: Nor those in its last ``drain_s`` (their recorded answers may be cut).
        info: Extra fields for the report (mode, server, ...).

    Returns:
        A JSON-ready dict; ``passed`` is false when a check failed.
    """
    end = max(warmup_s + 1e-3, run.duration_s - drain_s)
    window = (warmup_s, end)
    sections: dict[str, dict[str, Any]] = {}
    before_all, after_all = [], []
    actions_all = _ActionStats()
    statuses_before: Counter[str] = Counter()
    statuses_after: Counter[str] = Counter()
    recorded = False
    after_compared: list[ResponseRecord] = []  # the replay of robots that have a before
    for name, track in run.robots.items():
        sec, (before, after, actions) = _robot_section(
            track, result.sent.get(name, []), result.chunks.get(name, {}), run.start_ns, window)
        sections[name] = sec
        before_all += before
        after_all += after
        actions_all.merge(actions)
        if sec["before"] is not None:
            recorded = True
            after_compared += after
            statuses_before.update(sec["before"]["statuses"])
        statuses_after.update(sec["after"]["statuses"])
    total = {
        "before": _metrics(before_all, window, dict(statuses_before)) if recorded else None,
        "after": _metrics(after_all, window, dict(statuses_after)),
        "sent": sum(s["sent"] for s in sections.values()),
        "unanswered": sum(s["unanswered"] for s in sections.values()),
        "actions": actions_all.to_dict(),
    }
    # ALL's deltas and checks compare like with like: only robots with a before.
    compared = total["after"]
    if recorded and len(after_compared) != len(after_all):
        compared = _metrics(after_compared, window, {})
        total["after_compared"] = compared
    total["delta"] = _delta(total["before"], compared)
    checks = _run_checks({**sections, "ALL": {**total, "after": compared}}, limits)
    player = player_lateness(result.lags_s)
    late = _lateness_warning(player)
    return {
        **(info or {}),
        "bag": str(run.source.path), "storage": run.source.storage,
        "salvaged": run.source.salvaged, "duration_s": run.duration_s,
        "window_s": list(window), "warnings": [*run.warnings, *([late] if late else [])],
        "skipped_messages": run.skipped, "read_error": run.source.read_error,
        "schema_changes": [change.to_dict() for change in run.schema_changes],
        "published": dict(result.published), "max_lag_s": result.max_lag_s,
        "player": player,
        "duplicates": result.duplicates, "stopped_early": result.stopped,
        "robots": sections, "total": total, "checks": checks,
        "thresholds": limits.__dict__.copy(),
        "passed": all(c["passed"] for c in checks),
    }


#: The before columns of a robot the bag recorded no chunks for.
_NOT_RECORDED: dict[str, Any] = {"requests": "n/a", "attainment": None,
                                 "latency_p50_ms": None, "latency_p99_ms": None}


def _pct(value: float | None) -> str:
    if value is None:
        return "n/a"
    return "-" if not math.isfinite(value) else f"{value * 100:.1f}%"


def _ms(value: float | None) -> str:
    if value is None:
        return "n/a"
    return "-" if not math.isfinite(value) else f"{value:.1f}"


def player_lateness(lags_s: list[float]) -> dict[str, Any]:
    """How far the player published behind the recording's schedule (ms), and how often.

    Args:
        lags_s: Per published recorded message, its publish time minus its due time.
    """
    if not lags_s:
        return {"messages": 0, "p50_ms": None, "p99_ms": None, "max_ms": None, "late": 0,
                "late_after_ms": LATE_S * MS_PER_S}
    lags = np.asarray(lags_s, dtype=float)
    return {"messages": int(lags.size), "p50_ms": float(np.percentile(lags, 50)) * MS_PER_S,
            "p99_ms": float(np.percentile(lags, 99)) * MS_PER_S,
            "max_ms": float(lags.max()) * MS_PER_S, "late": int((lags > LATE_S).sum()),
            "late_after_ms": LATE_S * MS_PER_S}


def _lateness_warning(lateness: dict[str, Any]) -> str | None:
    if not lateness["late"]:
        return None
    return (f"the player fell behind the recording: {lateness['late']} of "
            f"{lateness['messages']} messages published over {lateness['late_after_ms']:.0f} "
            f"ms late, at most {lateness['max_ms']:.0f} ms (P99 {lateness['p99_ms']:.0f} ms); "
            "the server may have picked older observations than recorded")


def format_report(report: dict[str, Any]) -> str:
    """The report as a text table (per robot and ALL), followed by the checks."""
    head = (f"{'robot':<10}{'req b/a':>10}{'attain before':>15}{'after':>8}{'P50 b/a ms':>15}"
            f"{'P99 b/a ms':>15}{'actions same/cmp':>18}{'rms':>10}  statuses after")
    lines = [head, "-" * len(head)]
    for name, sec in {**report["robots"], "ALL": report["total"]}.items():
        a, act = sec["after"], sec["actions"]
        b = sec["before"] or _NOT_RECORDED
        rms = "-" if not math.isfinite(act["rms"]) else f"{act['rms']:.2e}"
        lines.append(
            f"{name:<10}{b['requests']:>5}/{a['requests']:<4}{_pct(b['attainment']):>15}"
            f"{_pct(a['attainment']):>8}"
            f"{_ms(b['latency_p50_ms']) + '/' + _ms(a['latency_p50_ms']):>15}"
            f"{_ms(b['latency_p99_ms']) + '/' + _ms(a['latency_p99_ms']):>15}"
            f"{str(act['identical']) + '/' + str(act['comparable']):>18}{rms:>10}"
            f"  {a['statuses']}")
    total = report["total"]["actions"]
    lines.append(f"action pairs: {total['pairs']}, comparable (same observations): "
                 f"{total['comparable']}, identical: {total['identical']}"
                 + ("  -> actions match exactly" if total["all_identical"] else ""))
    player = report.get("player")
    if player and player["messages"]:
        lines.append(f"player: {player['messages']} recorded messages published, behind "
                     f"schedule P50 {player['p50_ms']:.1f} ms, P99 {player['p99_ms']:.1f} ms, "
                     f"max {player['max_ms']:.1f} ms; {player['late']} over "
                     f"{player['late_after_ms']:.0f} ms late")
    for warning in report["warnings"]:
        lines.append(f"warning: {warning}")
    for c in report["checks"]:
        mark = "ok  " if c["passed"] else "FAIL"
        lines.append(f"{mark} {c['check']:<22}{c['scope']:<10} value {c['value']:.4g} "
                     f"limit {c['limit']:.4g}")
    lines.append("PASSED" if report["passed"] else "REGRESSION: a threshold was crossed")
    return "\n".join(lines)
