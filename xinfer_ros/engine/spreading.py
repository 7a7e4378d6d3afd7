"""Phase-spreading release times for the engine's results, safe across threads.

Requests arrive on the callers' threads and results are finished on the dispatcher;
the :class:`~xinfer_ros.core.phase_spread.PhaseSpreader` they share sits behind one
lock here. The engine never sleeps on a held result: it stamps the result's
``release_at`` and the caller (the ROS server, the closed-loop driver) publishes it
then.
"""

from __future__ import annotations

import threading

from xinfer_ros.core.phase_spread import PhaseSpreader

__all__ = ["ReleasePlanner"]


class ReleasePlanner:
    """When each OK result may go out.

    Args:
        enabled: Spread phases; off releases every result when it is ready.
        lead: δ, from publishing a response to its robot's next request arriving (s).
        margin: Held results leave at least this long before their deadline (s).
    """

    def __init__(self, enabled: bool, lead: float, margin: float) -> None:
        #: The spreader (None when phase spreading is off); read it under no lock only
        #: in tests.
        self.spreader = PhaseSpreader(lead=lead, margin=margin) if enabled else None
        self._lock = threading.Lock()

    def arrived(self, robot: str, arrival: float, budget: float) -> None:
        """A request of ``robot`` with ``budget`` (s) reached the server at ``arrival``.

        A refused budget counts as tight: the robot sent now and sends again one
        period later.
        """
        if self.spreader is not None:
            with self._lock:
                self.spreader.record_arrival(robot, arrival, budget if budget > 0 else 0.0)

    def release_at(self, robot: str, ready: float, arrival: float, deadline: float) -> float:
        """The release time of an OK result ready at ``ready`` (``ready`` when off)."""
        if self.spreader is None:
            return ready
        with self._lock:
            return self.spreader.release_time(robot, ready, arrival, deadline)

    def forget(self, robot: str) -> None:
        """Drop ``robot``'s phase (it left the fleet)."""
        if self.spreader is not None:
            with self._lock:
                self.spreader.forget(robot)

    def held(self) -> tuple[int, float]:
        """Results held so far and their total hold (s)."""
        if self.spreader is None:
            return 0, 0.0
        with self._lock:
            return self.spreader.held, self.spreader.held_s
