"""Where a closed-loop run's late requests spent their time, by budget class.

A late request waited somewhere: in the policy's ready queues (``queue_ms``), on a lane
after its launch (``lane_ms``: a busy lane, a batch held for mates), or in a stage that
ran long (a batch is longer than a unit alone). :func:`lateness` splits each budget
class's late and on-time requests' server time into those parts, so that a scheduling
change can be judged by where it moved the time, not only by the attainment it reached
(issue 28: on the CPU engine the forming policies lost 90 ms requests to lane waits
and batches that unbatched XInfer lost to its ready queue). ROS-free.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import TypedDict

from xinfer_ros.core.timing import MS_PER_S
from xinfer_ros.engine.closed_loop import Sent
from xinfer_ros.engine.types import StageTimings

__all__ = ["PARTS", "LatenessRow", "lateness"]

#: The parts of a request's server time, as :class:`StageTimings` names them (``_ms``).
PARTS: tuple[str, ...] = ("queue", "lane", "prepare", "vit", "prefill", "action", "output")


class LatenessRow(TypedDict):
    """One budget class of :func:`lateness`."""

    # Requests of the class sent in the window, and those not answered OK in budget.
    requests: int
    late: int
    # Mean ms of each part (PARTS) over the late and the on-time requests that the
    # engine answered (NaN: none).
    late_ms: dict[str, float]
    on_time_ms: dict[str, float]
    # Share of those whose Action ran in a batch of more than one unit (NaN: none).
    late_batched: float
    on_time_batched: float


def lateness(sent: Iterable[Sent], window: tuple[float, float]) -> dict[str, LatenessRow]:
    """Late and on-time requests' server time by part, per budget class.

    Args:
        sent: the run's requests (:attr:`ClosedLoopRun.sent`).
        window: only requests sent in ``[start, end)`` s count.

    Returns:
        Rows keyed by the budget in ms (``"90"``, the keys of the metrics'
        ``per_budget``), in increasing budget order.
    """
    groups: dict[float, tuple[list[StageTimings], list[StageTimings], list[int]]] = {}
    for s in sent:
        if not window[0] <= s.send_time < window[1]:
            continue
        late_t, on_t, counts = groups.setdefault(s.budget, ([], [], [0, 0]))
        counts[0] += 1
        res = s.result
        # response_time is when the answer reached the robot (run time, as send_time).
        on_time = (res is not None and res.ok and s.response_time is not None
                   and s.response_time - s.send_time <= s.budget)
        if not on_time:
            counts[1] += 1
        if res is not None:
            (on_t if on_time else late_t).append(res.timings)
    return {f"{budget * MS_PER_S:g}": {
        "requests": counts[0], "late": counts[1],
        "late_ms": _means(late_t), "on_time_ms": _means(on_t),
        "late_batched": _batched(late_t), "on_time_batched": _batched(on_t)}
        for budget, (late_t, on_t, counts) in sorted(groups.items())}


def _means(rows: list[StageTimings]) -> dict[str, float]:
    out: dict[str, float] = {}
    for part in PARTS:
        vals = [v for t in rows if math.isfinite(v := float(getattr(t, f"{part}_ms")))]
        out[part] = sum(vals) / len(vals) if vals else math.nan
    return out


def _batched(rows: list[StageTimings]) -> float:
    ran = [t.action_batch for t in rows if t.action_batch > 0]
    return sum(1 for k in ran if k > 1) / len(ran) if ran else math.nan
