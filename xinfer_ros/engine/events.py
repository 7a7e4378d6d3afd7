"""What the engine's dispatcher thread reacts to: one small frozen type per event.

Caller threads (``submit``, ``cancel``, ``set_policy``, ``set_switches``), the CPU pool
(preparation, output) and the lanes (unit completions) put these on the dispatcher's
:class:`EventQueue`; the dispatcher matches them by type. An event about one request
carries it in ``live`` (:class:`RequestEvent`), so an internal error while handling it
fails that request alone. The queue counts the events not yet handled, so that the
engine's fast path (a worker thread taking the dispatcher's step itself) can tell an
idle engine from one with news on its way.
"""

from __future__ import annotations

import math
import queue
import threading
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TypeAlias

import numpy as np

from xinfer_ros.core.policy import Policy
from xinfer_ros.core.stages import Stage
from xinfer_ros.engine.admission import LiveRequest
from xinfer_ros.engine.types import EngineConfig, Status

__all__ = ["Cancelled", "Dropped", "Event", "EventQueue", "OutputDone", "PolicySwitch",
           "Prepared", "RequestEvent", "Stop", "SwitchesChange", "UnitDone", "Wake", "WorkerEvent"]


@dataclass(frozen=True, slots=True)
class RequestEvent:
    """An event about one request."""

    #: The request the event concerns.
    live: LiveRequest


@dataclass(frozen=True, slots=True)
class Prepared(RequestEvent):
    """CPU preparation ended (CPU pool)."""

    #: The backend's request state, or None when preparation failed.
    state: object
    #: Status and reason to finish with when preparation failed, else None.
    error: tuple[Status, str] | None


@dataclass(frozen=True, slots=True)
class UnitDone(RequestEvent):
    """One stage unit of the request ran (lane thread)."""

    #: The unit's stage.
    stage: Stage
    #: Engine time the unit (its batch) started (s).
    t0: float
    #: Engine time it ended (s).
    t1: float
    #: What the unit raised, or None when it ran.
    error: BaseException | None
    #: Engine time the policy launched the unit (s); NaN when not known.
    issued: float = math.nan
    #: Units in the forward it ran in (its batch).
    batch: int = 1


@dataclass(frozen=True, slots=True)
class OutputDone(RequestEvent):
    """CPU output processing ended (CPU pool)."""

    #: The ``(H, D)`` chunk, or None when output processing failed.
    actions: np.ndarray | None
    #: Why output processing failed, or None.
    error: str | None


@dataclass(frozen=True, slots=True)
class Dropped(RequestEvent):
    """``submit`` detached the request (superseded, or shed by backpressure)."""


@dataclass(frozen=True, slots=True)
class Cancelled:
    """A robot's live requests are cancelled (``cancel``)."""

    #: The robot.
    robot_id: str
    #: Why, as the results' reasons say after ``cancelled:``.
    reason: str


@dataclass(frozen=True, slots=True)
class PolicySwitch:
    """New requests go to ``policy`` from now on (``set_policy``)."""

    #: The policy, already built with the engine's slots.
    policy: Policy
    #: Resolved with its name once the switch took effect.
    future: Future[str]


@dataclass(frozen=True, slots=True)
class SwitchesChange:
    """The §6.4 ablation switches change (``set_switches``)."""

    #: Switch name -> new value (only the switches that change).
    changes: dict[str, bool]
    #: Resolved with the new configuration once applied.
    future: Future[EngineConfig]


@dataclass(frozen=True, slots=True)
class Stop:
    """The dispatcher ends (``close``)."""


@dataclass(frozen=True, slots=True)
class Wake:
    """Decide again: a step taken off the dispatcher left work a tick must revisit."""


#: What a worker thread reports about its request (a fast-path step may handle it).
WorkerEvent: TypeAlias = Prepared | UnitDone | OutputDone

#: Everything the dispatcher's queue carries.
Event: TypeAlias = (Prepared | UnitDone | OutputDone | Dropped | Cancelled | PolicySwitch
                    | SwitchesChange | Wake | Stop)


class EventQueue:
    """The dispatcher's queue; it counts the events put and not yet handled.

    Thread-safe. The dispatcher calls :meth:`handled` once it has handled what it took,
    so :attr:`pending` counts an event from :meth:`put` until then, also while the
    dispatcher holds it between taking and handling.
    """

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[Event] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._pending = 0

    def put(self, event: Event) -> None:
        """Queue ``event`` for the dispatcher."""
        with self._lock:
            self._pending += 1
        self._queue.put(event)

    def take(self, timeout: float | None) -> list[Event]:
        """Wait up to ``timeout`` s (None: forever) for an event; return it and all queued.

        Returns:
            The events in queue order; empty when the wait timed out.
        """
        try:
            batch = [self._queue.get(timeout=timeout)]
        except queue.Empty:
            return []
        while True:
            try:
                batch.append(self._queue.get_nowait())
            except queue.Empty:
                return batch

    def handled(self, count: int) -> None:
        """``count`` events taken earlier have been handled."""
        with self._lock:
            self._pending -= count

    @property
    def pending(self) -> int:
        """Events put and not yet handled."""
        with self._lock:
            return self._pending
