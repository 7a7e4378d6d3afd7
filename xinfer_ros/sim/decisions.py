"""Timing every policy call of a simulated run (the decision-cost benchmark's probe).

A :class:`DecisionRecorder` handed to :class:`~xinfer_ros.sim.engine_loop.Simulation`
times what the policy does at each decision instant: recording the instant's events
(``add_request``, ``complete``) and the decision itself (``schedule``), as the paper's
App. C.3 "policy update + admission check". Only the policy's own calls sit inside the
timer; the simulator's bookkeeping does not.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from xinfer_ros.core.policy import Policy, SchedulerOutput

__all__ = ["DecisionRecorder", "DecisionSample"]


@dataclass(frozen=True, slots=True)
class DecisionSample:
    """One timed decision instant.

    Attributes:
        t: decision time (simulated seconds).
        kind: the instant's first event: ``"arrival"``, ``"complete"`` or ``"tick"``
            (no event: a periodic tick).
        queued: ready units the decision considered (left queued + launched).
        launches: units the decision launched.
        cost_ns: wall time of the policy's calls at this instant (event recording +
            decision), ns.
    """

    t: float
    kind: str
    queued: int
    launches: int
    cost_ns: int


@dataclass
class DecisionRecorder:
    """Times the policy's calls of each decision instant in ``[record_from, until]``.

    Attributes:
        clock: nanosecond timer around each policy call.
        record_from: decisions before this simulated time are not recorded (warm-up).
        until: decisions after this simulated time are not recorded (drain).
        samples: the recorded decisions, in chronological order.
    """

    clock: Callable[[], int] = time.perf_counter_ns
    record_from: float = 0.0
    until: float = math.inf
    samples: list[DecisionSample] = field(default_factory=list)
    _event_ns: int = 0
    _kind: str = ""

    def timed(self, call: Callable[..., object], kind: str) -> Callable[..., None]:
        """``call`` (a policy's event method) with its time added to the next decision."""
        clock = self.clock

        def timed_call(*args: object) -> None:
            t0 = clock()
            call(*args)
            self._event_ns += clock() - t0
            if not self._kind:
                self._kind = kind

        return timed_call

    def schedule(self, policy: Policy, t: float) -> SchedulerOutput:
        """Run ``policy.schedule(t)`` and record the instant's cost."""
        clock = self.clock
        t0 = clock()
        out = policy.schedule(t)
        cost = self._event_ns + clock() - t0
        kind = self._kind or "tick"
        self._event_ns, self._kind = 0, ""
        if self.record_from <= t <= self.until:
            queued = sum(len(policy.ready_queue(s)) for s in range(3)) + len(out.launches)
            self.samples.append(DecisionSample(t, kind, queued, len(out.launches), cost))
        return out

    def add_to_last(self, t: float, cost_ns: int) -> None:
        """Add policy work done after :meth:`schedule` at ``t`` to that instant's sample.

        Batch formation runs once the launches reach the GPU; it is decision work.
        """
        if self.samples and self.samples[-1].t == t:
            last = self.samples[-1]
            self.samples[-1] = replace(last, cost_ns=last.cost_ns + cost_ns)
