"""Phase-spreading response release: keep the robots' send phases apart.

Under Eq. 1 a robot sends its next request at ``max(s_j + T_E, r_j)``. While its
responses return within ``T_E`` its send phase never moves; a response later than
``T_E`` sets the next send to ``r_j`` itself. When a scheduler defers wide-budget work
and then releases it together, the responses return together, the robots' phases
coincide and, once those robots switch to tight budgets, their requests arrive in
lockstep and slow each other (``docs/BENCHMARKS.md``, fleet simulator).

Such a response is already past ``T_E``, so its robot's phase moves wherever the
response lands. The server may hold it a little longer, never past the request's
deadline less a margin, and choose the moment so that the robot's next request arrives
in the widest gap between the other robots' arrival phases. Responses within ``T_E``
are never held: they do not move a phase.

Everything is in server time: ``a_k`` is the latest request arrival of each robot with
a tight budget (at most ``T_E``: those robots send exactly every period), and a
response published at ``x`` brings that robot's next request at about ``x + δ``
(down- plus uplink). Phases of wide-budget robots are not avoided: their next sends
move with their responses anyway, and avoiding them cost capacity on ``phases``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from itertools import pairwise

from xinfer_ros.core.constants import DELTA, SEND_PERIOD
from xinfer_ros.core.errors import InvalidRequestError
from xinfer_ros.core.request import check_time

__all__ = ["PHASE_SPREAD_MARGIN", "PhaseSpreader", "best_release"]

#: Held responses still leave the server this long before the request's deadline (s).
PHASE_SPREAD_MARGIN: float = 0.010
#: A robot whose latest arrival is older than this many periods no longer has a phase
#: (it stopped, or its request has been in flight longer than any budget allows).
_STALE_PERIODS = 4.0


def best_release(earliest: float, latest: float, phases: list[float], period: float,
                 lead: float) -> float:
    """The time in ``[earliest, latest]`` whose ``time + lead`` is farthest from ``phases``.

    Distance is circular modulo ``period``; among equally good times the earliest wins.

    Args:
        earliest: First allowed release time.
        latest: Last allowed release time (``>= earliest``).
        phases: Other robots' arrival phases (any real numbers; taken modulo ``period``).
        period: The send period ``T_E``.
        lead: Time from release to the robot's next arrival (δ).

    Returns:
        The chosen release time; ``earliest`` when ``phases`` is empty.
    """
    if not phases or latest <= earliest:
        return earliest
    lo, hi = earliest + lead, min(latest, earliest + period) + lead
    # Every occurrence of every phase that can bound a gap touching [lo, hi].
    k0 = math.floor((lo - period) / period)
    occ = sorted(p % period + (k0 + k) * period for p in phases for k in range(4))
    best_y, best_d = lo, -1.0
    for a, b in pairwise(occ):
        left, right = max(a, lo), min(b, hi)
        if left > right:
            continue
        y = min(max(0.5 * (a + b), left), right)
        d = min(y - a, b - y)
        if d > best_d + 1e-12 or (abs(d - best_d) <= 1e-12 and y < best_y):
            best_y, best_d = y, d
    return best_y - lead


@dataclass
class PhaseSpreader:
    """Tracks the robots' arrival phases and picks release times for late responses.

    Args:
        period: ``T_E``, the robots' minimum send period (s).
        lead: δ, from publishing a response to the robot's next request arriving (s).
        margin: Held responses leave at least this long before their deadline (s).
    """

    period: float = SEND_PERIOD
    lead: float = DELTA
    margin: float = PHASE_SPREAD_MARGIN
    _arrivals: dict[str, float] = field(default_factory=dict, repr=False)
    #: Responses held so far, and their total hold (s), for statistics.
    held: int = 0
    held_s: float = 0.0

    def __post_init__(self) -> None:
        """Validate the times.

        Raises:
            InvalidRequestError: a non-finite time, a period <= 0, or a negative lead
                or margin.
        """
        self.period = check_time("period", self.period, positive=True)
        self.lead = check_time("lead", self.lead)
        self.margin = check_time("margin", self.margin)
        if self.lead < 0 or self.margin < 0:
            raise InvalidRequestError(
                f"lead and margin must be >= 0 s, got {self.lead!r}, {self.margin!r}")

    def record_arrival(self, robot: str, t: float, budget: float = 0.0) -> None:
        """A request of ``robot`` with ``budget`` (s) arrived at ``t``.

        Only a robot whose budget is at most ``T_E`` keeps a fixed phase: on time, its
        response returns within the period and its next send is ``s + T_E``. A wider
        budget lets the response, and so the next send, land anywhere, so that robot
        has no phase to avoid until it sends a tight request again.
        """
        if budget > self.period:
            self._arrivals.pop(robot, None)
        else:
            self._arrivals[robot] = t

    def forget(self, robot: str) -> None:
        """Drop ``robot`` (it left the fleet)."""
        self._arrivals.pop(robot, None)

    def release_time(self, robot: str, ready: float, arrival: float, deadline: float) -> float:
        """When to publish a response that is ready at ``ready``.

        Args:
            robot: The robot the response goes to.
            ready: When the response could be published.
            arrival: Arrival time ``a_j`` of the request it answers.
            deadline: The request's deadline ``ℓ_j = a_j + b_j − δ`` (server time).

        Returns:
            ``ready`` when the response keeps the robot's phase (it returns within
            ``T_E``) or there is no room before the deadline; otherwise the release
            time that puts the robot's next arrival in the widest phase gap. The
            robot's expected next arrival is recorded at once, so responses released
            soon after avoid it too.
        """
        if ready + self.lead <= arrival + self.period:
            return ready
        latest = deadline - self.margin
        if latest <= ready:
            return ready
        stale = ready - _STALE_PERIODS * self.period
        phases = [a for r, a in self._arrivals.items() if r != robot and a >= stale]
        release = best_release(ready, latest, phases, self.period, self.lead)
        self._arrivals[robot] = release + self.lead
        if release > ready:
            self.held += 1
            self.held_s += release - ready
        return release
