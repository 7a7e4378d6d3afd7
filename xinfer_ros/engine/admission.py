"""Admission into the engine: the bound on live requests, superseding and shedding.

:class:`LiveTable` is the one place that decides whether a submitted request may hold
engine state. It is shared by caller threads (``submit``, ``cancel``) and the
dispatcher (completions), so every method takes its lock; it never calls back into
the engine. What it detaches it returns, and the dispatcher finishes those requests at
their next stage boundary.
"""

from __future__ import annotations

import itertools
import math
import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field

from xinfer_ros.core.policy import Policy
from xinfer_ros.core.request import Request
from xinfer_ros.core.stages import Stage
from xinfer_ros.engine.api import ResultCallback
from xinfer_ros.engine.types import EngineResult, Overflow, StageTimings, Status
from xinfer_ros.model.inputs import RequestInputs

__all__ = ["Admission", "LiveRequest", "LiveTable", "ResultCallback", "expiry"]


def expiry(deadline: float, arrival: float, service_s: float) -> float:
    """When a request still waiting for a stage is shed (s, engine clock).

    At its deadline, unless its window ``deadline - arrival`` is shorter than
    ``service_s``, its service alone on the device (R_j(0)): then it cannot be on time
    under any schedule, and shedding it would only have its robot send another that
    cannot be either. Its window then counts from the earliest answer the device
    allows: it expires ``service_s`` after its deadline.
    """
    return deadline + service_s if deadline - arrival < service_s else deadline


@dataclass(eq=False)
class LiveRequest:
    """Engine-side record of one submitted request (dispatcher-owned once admitted).

    Attributes:
        rid: Engine-assigned id.
        robot_id: The submitting robot.
        request: The scheduler's view, built when the request is submitted: its
            budget, arrival and the one computation of its deadline; None when the
            submitted budget was refused.
        inputs: Backend inputs until preparation consumes them.
        callback: Called once with the result.
        future: Resolved once with the result.
        submitted: Engine-clock submit time (s).
        arrival: Engine-clock time the request reached the server (s).
        state: Backend state between preparation and release.
        policy: The policy ``request`` was added to, once added.
        running: The stage whose unit runs now, if any.
        in_output: Whether CPU output processing runs now.
        model_started: Whether any stage unit was issued (backpressure sheds only
            requests that have not started).
        ready_since: When the request last became ready for a stage (queue time).
        drop: Status and reason to finish with at the next boundary (superseded,
            shed or cancelled).
        timings: Per-stage timings reported with the result.
        expires_at: When it is shed if still waiting for a stage (:func:`expiry`,
            fixed at submit; NaN: never, e.g. a refused budget).
    """

    rid: int
    robot_id: str
    request: Request | None
    inputs: RequestInputs | None
    callback: ResultCallback | None
    future: Future[EngineResult]
    submitted: float
    arrival: float = math.nan
    state: object = None
    policy: Policy | None = None
    running: Stage | None = None
    in_output: bool = False
    model_started: bool = False
    ready_since: float = math.nan
    drop: tuple[Status, str] | None = None
    timings: StageTimings = field(default_factory=StageTimings)
    expires_at: float = math.nan

    @property
    def budget(self) -> float:
        """Budget b_j (s); NaN when the submitted budget was refused."""
        return self.request.budget if self.request is not None else math.nan

    @property
    def deadline(self) -> float:
        """Its deadline ``arrival + budget - δ`` (s; NaN when the budget was refused)."""
        return self.request.deadline if self.request is not None else math.nan

    @property
    def idle(self) -> bool:
        """Added to a policy and neither running a unit nor in output."""
        return self.policy is not None and self.running is None and not self.in_output


@dataclass(frozen=True)
class Admission:
    """What :meth:`LiveTable.admit` decided.

    Attributes:
        refused: Why the request may not hold state, or empty when it was admitted.
        dropped: Requests detached to make room (each with its ``drop`` set): the
            robot's older request when superseding, or the oldest unstarted request
            under :attr:`Overflow.SHED_OLDEST`.
    """

    refused: str = ""
    dropped: tuple[LiveRequest, ...] = ()


class LiveTable:
    """Live requests by id and by robot, bounded by ``max_live``.

    Args:
        max_live: Requests that may hold state at once.
        overflow: What a full table does with a new request: refuse it, or shed the
            oldest request whose model work has not started.
        supersede: Whether a robot's new request replaces its older ones.
    """

    def __init__(self, max_live: int, overflow: Overflow, supersede: bool) -> None:
        self.max_live = max_live
        self.overflow = overflow
        self.supersede = supersede
        self._lock = threading.Lock()
        self._live: dict[int, LiveRequest] = {}
        self._by_robot: dict[str, set[int]] = {}
        self._ids = itertools.count(1)
        self._closed = False
        self._counts: dict[str, int] = {s.name: 0 for s in Status}

    def next_id(self) -> int:
        """A fresh request id."""
        with self._lock:
            return next(self._ids)

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    def close(self) -> bool:
        """Admit nothing from now on; returns False when already closed."""
        with self._lock:
            was_open, self._closed = not self._closed, True
            return was_open

    def admit(self, live: LiveRequest) -> Admission:
        """Admit ``live`` unless closed or full; supersede the robot's older requests.

        The robot's older requests are superseded only if this one is admitted.
        """
        with self._lock:
            if self._closed:
                return Admission("engine is closed")
            older = ([self._live[r] for r in self._by_robot.get(live.robot_id, ())]
                     if self.supersede else [])
            dropped: list[LiveRequest] = []
            if len(self._live) - len(older) >= self.max_live:
                victim = (self._oldest_unstarted() if self.overflow is Overflow.SHED_OLDEST
                          else None)
                if victim is None:
                    return Admission(f"backpressure: {len(self._live)} live requests "
                                     f"(max_live={self.max_live})")
                self._detach(victim)
                victim.drop = (Status.SHED, f"shed by backpressure (max_live={self.max_live})")
                dropped.append(victim)
            for old in older:
                if old not in dropped:
                    self._detach(old)
                    old.drop = old.drop or (
                        Status.SHED, f"superseded by a newer request of robot {live.robot_id}")
                    dropped.append(old)
            self._live[live.rid] = live
            self._by_robot.setdefault(live.robot_id, set()).add(live.rid)
            return Admission(dropped=tuple(dropped))

    def take_robot(self, robot_id: str) -> list[LiveRequest]:
        """Detach and return every live request of ``robot_id``."""
        with self._lock:
            lives = [self._live[r] for r in self._by_robot.get(robot_id, ())]
            for live in lives:
                self._detach(live)
        return lives

    def take_expired(self, now: float) -> list[LiveRequest]:
        """Detach and return idle requests whose expiry (:func:`expiry`) passed before ``now``."""
        return self._take_idle_past_expiry(lambda live: now)

    def take_doomed(self, finish: Callable[[LiveRequest], float]) -> list[LiveRequest]:
        """Detach and return idle requests whose predicted ``finish`` is past their expiry.

        ``finish`` is called with the table's lock held, on idle requests only.
        """
        return self._take_idle_past_expiry(finish)

    def _take_idle_past_expiry(self, when: Callable[[LiveRequest], float]
                               ) -> list[LiveRequest]:
        """Detach and return idle, undropped requests with ``when(live)`` past their expiry."""
        with self._lock:
            taken = [lv for lv in self._live.values()
                     if lv.idle and lv.drop is None and when(lv) > lv.expires_at]
            for live in taken:
                self._detach(live)
        return taken

    def retire(self, live: LiveRequest, status: Status) -> None:
        """Detach a finished request and count its status."""
        with self._lock:
            self._detach(live)
            self._counts[status.name] += 1

    def alone(self, live: LiveRequest) -> bool:
        """Whether no request but ``live`` holds a place (``live`` itself need not)."""
        with self._lock:
            return all(rid == live.rid for rid in self._live)

    def remaining(self) -> list[LiveRequest]:
        """The requests still live."""
        with self._lock:
            return list(self._live.values())

    def __len__(self) -> int:
        with self._lock:
            return len(self._live)

    def counts(self) -> dict[str, int]:
        """Results so far by status name."""
        with self._lock:
            return dict(self._counts)

    # -- caller holds the lock --------------------------------------------------------------
    def _detach(self, live: LiveRequest) -> None:
        """Stop counting ``live`` against the bound; the dispatcher finishes it."""
        self._live.pop(live.rid, None)
        ids = self._by_robot.get(live.robot_id)
        if ids is not None:
            ids.discard(live.rid)
            if not ids:
                del self._by_robot[live.robot_id]

    def _oldest_unstarted(self) -> LiveRequest | None:
        waiting = [lv for lv in self._live.values() if not lv.model_started and lv.drop is None]
        return min(waiting, key=lambda lv: (lv.submitted, lv.rid)) if waiting else None
