"""Baseline policies of the paper's comparison (§6.3, App. C.4): FIFO, EDF, Slack-Gate.

All three visit stages in Algorithm 1's order (Action, Prefill, ViT) and never exceed
the physical slots.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from xinfer_ros.core.constants import (
    DEFAULT_EDF_LIMITS,
    DEFAULT_SLACK_GATE_LIMITS,
    SLACK_GATE_THRESHOLD,
)
from xinfer_ros.core.errors import InvalidRequestError
from xinfer_ros.core.policy import Launch, Policy, PolicyParams, SlotCounts, parse_slots
from xinfer_ros.core.request import Request, check_time
from xinfer_ros.core.stages import DISPATCH_ORDER

if TYPE_CHECKING:  # typing.Unpack is 3.11+ (setup.py allows 3.10): annotations only
    from typing import Unpack

__all__ = ["EDFPolicy", "FIFOPolicy", "SlackGatePolicy"]


def _arrival_key(r: Request) -> tuple[float, int]:
    return (r.arrival, r.request_id)


def _deadline_key(r: Request) -> tuple[float, int]:
    return (r.deadline, r.request_id)


class FIFOPolicy(Policy):
    """Ready work of each stage in request-arrival order, as slots allow."""

    name = "fifo"
    time_dependent = False

    def _dispatch(self, t: float) -> list[Launch]:
        out: list[Launch] = []
        counts, slots = self.tracker.counts, self.slots
        for s in DISPATCH_ORDER:
            ready = self._ready[s]
            free = slots[s] - counts[s]
            if free <= 0 or not ready:
                continue
            for r in sorted(ready.values(), key=_arrival_key)[:free]:
                out.append(self._issue(r, s, t))
        return out


class EDFPolicy(Policy):
    """Per-stage earliest-deadline-first queues with fixed per-stage concurrency limits.

    Args:
        limits: at most this many units per stage run at once (also capped by slots).
        **kwargs: see :class:`Policy`.
    """

    name = "edf"
    time_dependent = False

    def __init__(self, *, limits: SlotCounts | None = None,
                 **kwargs: Unpack[PolicyParams]) -> None:
        super().__init__(**kwargs)
        self.limits = parse_slots(limits if limits is not None else DEFAULT_EDF_LIMITS, "limits")

    def _dispatch(self, t: float) -> list[Launch]:
        out: list[Launch] = []
        counts = self.tracker.counts
        for s in DISPATCH_ORDER:
            ready = self._ready[s]
            cap = min(self.slots[s], self.limits[s])
            free = cap - counts[s]
            if free <= 0 or not ready:
                continue
            for r in sorted(ready.values(), key=_deadline_key)[:free]:
                out.append(self._issue(r, s, t))
        return out


class SlackGatePolicy(Policy):
    """Deadline queues; ordinary work waits while any request is short of slack.

    A request is *urgent* when its estimated slack σ_j = ℓ_j − t − R_j(n_r), at the
    observed running counts, is below ``threshold``. While any live request is urgent,
    only urgent requests' units start; otherwise all ready work starts in deadline
    order. Urgency is re-evaluated after every launch.

    Args:
        threshold: slack threshold (s); :data:`SLACK_GATE_THRESHOLD` by default.
        limits: per-stage concurrency limits below the slots (the paper tunes the ViT
            concurrency jointly with the threshold); :data:`DEFAULT_SLACK_GATE_LIMITS`
            by default, ``None`` for the slots alone.
        **kwargs: see :class:`Policy`.
    """

    name = "slack_gate"
    time_dependent = True

    def __init__(self, *, threshold: float = SLACK_GATE_THRESHOLD,
                 limits: SlotCounts | None = DEFAULT_SLACK_GATE_LIMITS,
                 **kwargs: Unpack[PolicyParams]) -> None:
        super().__init__(**kwargs)
        self.threshold = check_time("slack_gate threshold", threshold)
        if self.threshold < 0:
            raise InvalidRequestError(f"slack_gate threshold must be >= 0 s, got {threshold!r}")
        self.limits = parse_slots(limits, "limits") if limits is not None else None

    def urgent(self, t: float) -> set[int]:
        """Ids of live requests whose estimated slack is below the threshold."""
        tr = self.tracker
        n = tr.counts
        limit = self.threshold
        return {rid for rid, r in self._requests.items()
                if r.deadline - t - tr.remaining(r, t, n) < limit}

    def _dispatch(self, t: float) -> list[Launch]:
        out: list[Launch] = []
        counts = self.tracker.counts
        urgent = self.urgent(t)
        for s in DISPATCH_ORDER:
            cap = self.slots[s] if self.limits is None else min(self.slots[s], self.limits[s])
            ready = self._ready[s]
            if counts[s] >= cap or not ready:
                continue
            for r in sorted(ready.values(), key=_deadline_key):
                if counts[s] >= cap:
                    break
                if urgent and r.request_id not in urgent:
                    continue  # gate closed: ordinary work waits
                out.append(self._issue(r, s, t))
                urgent = self.urgent(t)
        return out
