"""One robot's request cycle: one request in flight, Eq. 1, timeout (no ROS, no torch).

A robot sends a request when none is in flight and its next send time has come. When
the answer arrives at ``r_j`` the next is due at ``max(s_j + T_E, r_j)`` (Eq. 1,
:func:`xinfer_ros.core.timing.next_send`); a request unanswered for ``timeout`` is
abandoned and the next is due at once. The RTC executor
(:class:`xinfer_ros.rtc.executor_core.ExecutorCore`) and the bag player's closed loop
keep their robots with this class, so that cycle is written once.
"""

from __future__ import annotations

from dataclasses import dataclass

from xinfer_ros.core.timing import next_send

__all__ = ["InFlight", "RequestCycle"]


@dataclass
class InFlight:
    """The request awaiting its answer.

    Attributes:
        seq: Its sequence number.
        sent: Its send time (monotonic s).
    """

    seq: int
    sent: float


@dataclass
class RequestCycle:
    """When the robot's next request goes out; see the module docstring.

    Attributes:
        period: Minimum send period ``T_E`` (s).
        timeout: Abandon a request unanswered this long (s).
        next_send: When the next request is due (s).
        in_flight: The request awaiting its answer (``None``: none).
    """

    period: float
    timeout: float
    next_send: float = 0.0
    in_flight: InFlight | None = None

    def due(self, now: float) -> bool:
        """Whether a request should go out at ``now``."""
        return self.in_flight is None and now >= self.next_send

    def sent(self, seq: int, now: float) -> None:
        """Request ``seq`` went out at ``now``."""
        self.in_flight = InFlight(seq, now)

    def answered(self, received: float) -> InFlight | None:
        """The request in flight was answered at ``received``; Eq. 1 sets the next send.

        Returns the request answered (``None`` if none was in flight).
        """
        flight, self.in_flight = self.in_flight, None
        if flight is not None:
            self.next_send = next_send(flight.sent, received, self.period)
        return flight

    def expired(self, now: float) -> bool:
        """Whether the request in flight has gone unanswered for ``timeout``."""
        return self.in_flight is not None and now - self.in_flight.sent >= self.timeout

    def abandon(self, now: float) -> InFlight | None:
        """Give up the request in flight; the next is due at once. Returns it."""
        flight, self.in_flight = self.in_flight, None
        self.next_send = now
        return flight
