"""The closed-loop robot client every driver runs (paper Eq. 1).

A robot has at most one request in flight. It sends request k at ``s_k``; once the
response arrives at ``r_k`` it sends the next at ``s_{k+1} = max(s_k + T_E, r_k)``.
Transport outside the server (δ) is split into an uplink and a downlink delay. The
simulator (``xinfer_ros.sim``), the engine's closed loop (``xinfer_ros.engine``) and the
decision-cost trace each advance their own clock and server, and all three keep their
robots with these classes, so Eq. 1, the request limit and the client's records are
written once. All times are seconds.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from xinfer_ros.core.constants import LINK_DELAY, SEND_PERIOD
from xinfer_ros.core.metrics import ResponseRecord
from xinfer_ros.core.timing import next_send

__all__ = ["BudgetSchedule", "Link", "Robot", "RobotSpec"]


class BudgetSchedule:
    """Budget of a robot's k-th request (k counts from 0)."""

    def __call__(self, k: int) -> float:  # pragma: no cover - interface
        """Return the budget in seconds of request ``k``."""
        raise NotImplementedError

    def values(self) -> tuple[float, ...]:  # pragma: no cover - interface
        """Return the distinct budgets this schedule can produce."""
        raise NotImplementedError


@dataclass(frozen=True, slots=True)
class RobotSpec:
    """One closed-loop robot.

    Attributes:
        robot_id: Index used in request ids and records.
        start: First send time (s).
        budgets: Budget of each request.
        max_requests: Stop after this many requests (``None``: until the run ends).
        tag: Free label (``"base"``, ``"burst1"``...) for per-group analysis.
    """

    robot_id: int
    start: float
    budgets: BudgetSchedule
    max_requests: int | None = None
    tag: str = "base"


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
        records: Completed (and, after :meth:`close`, unanswered) request records.
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
        """Send request ``sent`` at ``t``; return its budget (s).

        Raises:
            RuntimeError: When a request is already in flight.
        """
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

    def close(self) -> None:
        """End the run: a request still in flight is recorded as unanswered."""
        if self.in_flight:
            self.in_flight = False
            self.records.append(ResponseRecord(self.last_send, None, self.last_budget, False,
                                               self.spec.robot_id))
