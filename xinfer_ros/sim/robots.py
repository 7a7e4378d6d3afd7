"""Closed-loop robot clients (Eq. 1): one request in flight, minimum send period T_E.

A robot sends request k at ``s_k``; after the response arrives at ``r_k`` it sends the
next one at ``s_{k+1} = max(s_k + T_E, r_k)``. Transport outside the server (δ in the
paper) is split into an uplink and a downlink delay.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from xinfer_ros.core.constants import LINK_DELAY, SEND_PERIOD
from xinfer_ros.core.metrics import ResponseRecord
from xinfer_ros.core.timing import next_send
from xinfer_ros.sim.workloads import RobotSpec

__all__ = ["Link", "Robot"]


@dataclass(frozen=True, slots=True)
class Link:
    """Transport between robot and server; ``up + down`` is δ (4 ms by default)."""

    up: float = LINK_DELAY
    down: float = LINK_DELAY

    @property
    def delta(self) -> float:
        """Total time outside the server (s)."""
        return self.up + self.down


@dataclass(slots=True)
class Robot:
    """State of one closed-loop robot.

    Attributes:
        spec: Start time, budget schedule and request limit.
        period: Minimum send period ``T_E`` (s).
        sent: Requests sent so far (the next request's index k).
        last_send: Send time of the request in flight or last sent.
        last_budget: Budget of that request (s).
        in_flight: Whether a request awaits its response.
        records: Completed (and, at the end, unanswered) request records.
    """

    spec: RobotSpec
    period: float = SEND_PERIOD
    sent: int = 0
    last_send: float = float("nan")
    last_budget: float = float("nan")
    in_flight: bool = False
    records: list[ResponseRecord] = field(default_factory=list)

    def can_send(self) -> bool:
        """True while the robot's request limit is not reached."""
        limit = self.spec.max_requests
        return limit is None or self.sent < limit

    def send(self, t: float) -> float:
        """Send request ``sent`` at ``t``; return its budget (s)."""
        if self.in_flight:
            raise RuntimeError(f"robot {self.spec.robot_id} already has a request in flight")
        budget = self.spec.budgets(self.sent)
        self.sent += 1
        self.last_send = t
        self.last_budget = budget
        self.in_flight = True
        return budget

    def receive(self, t: float, budget: float, ok: bool = True) -> float:
        """Record the response arriving at ``t``; return the next send time (Eq. 1)."""
        self.in_flight = False
        self.records.append(
            ResponseRecord(self.last_send, t, budget, ok, self.spec.robot_id)
        )
        return next_send(self.last_send, t, self.period)
