"""What the engine's dispatcher thread reacts to: one small frozen type per event.

Caller threads (``submit``, ``cancel``, ``set_policy``, ``set_switches``), the CPU pool
(preparation, output) and the lanes (unit completions) put these on the dispatcher's
queue; the dispatcher matches them by type. An event about one request carries it in
``live`` (:class:`RequestEvent`), so an internal error while handling it fails that
request alone.
"""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass
from typing import TypeAlias

import numpy as np

from xinfer_ros.core.policy import Policy
from xinfer_ros.core.stages import Stage
from xinfer_ros.engine.admission import LiveRequest
from xinfer_ros.engine.types import EngineConfig, Status

__all__ = ["Cancelled", "Dropped", "Event", "OutputDone", "PolicySwitch", "Prepared",
           "RequestEvent", "Stop", "SwitchesChange", "UnitDone"]


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


#: Everything the dispatcher's queue carries.
Event: TypeAlias = (Prepared | UnitDone | OutputDone | Dropped | Cancelled | PolicySwitch
                    | SwitchesChange | Stop)
