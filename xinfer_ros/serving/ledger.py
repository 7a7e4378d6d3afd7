"""What a server answered, per robot: the source of its statistics and diagnostics.

The ROS server records every chunk it publishes here and turns the summaries into
``FleetStats`` and ``/diagnostics``; nothing here imports ROS, so the arithmetic is
tested without rclpy. Requests are kept per robot in a ring of floats allocated at
start (:data:`RECORDS_PER_ROBOT` rows, :class:`~xinfer_ros.core.ring.FloatRing`), so a
server that runs for weeks holds a fixed amount, the same from its first request.
Every method is thread-safe: results are recorded on engine and release threads while
ROS timers and services read the summaries.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import Enum

import numpy as np

from xinfer_ros.core.metrics import (
    RecordArrays,
    ResponseRecord,
    nan_percentiles,
    summarize_arrays,
)
from xinfer_ros.core.ring import FloatRing
from xinfer_ros.core.timing import MS_PER_S, budget_met

__all__ = ["RECORDS_PER_ROBOT", "Outcome", "RobotSummary", "ServingLedger", "request_age"]

#: Answered requests kept per robot for the statistics window.
RECORDS_PER_ROBOT = 4096


class Outcome(Enum):
    """How a published chunk counts in the statistics."""

    OK = "ok"
    #: Dropped after admission (superseded, backpressure, cancelled, expired).
    SHED = "shed"
    #: Refused or failed: counted as an error and remembered as the robot's last error.
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class RobotSummary:
    """One robot's (or the fleet's, ``robot_id == "*"``) figures over a window.

    The fields are those of ``xinfer_ros/RobotStats``; latencies in ms, NaN where
    there is nothing to measure.
    """

    robot_id: str
    requests: int
    on_time: int
    attainment: float
    on_time_goodput_hz: float
    latency_p50_ms: float
    latency_p95_ms: float
    latency_p99_ms: float
    mean_wide_latency_ms: float
    errors: int
    shed: int
    queue_depth: int
    request_age_p50_ms: float
    request_age_p99_ms: float
    stamp_attainment: float


#: The columns of a record: arrival at the callback, publication (NaN: none), budget
#: (s), usable chunk (1/0), outcome (:data:`_OUTCOME_CODES`), the request's age at the
#: callback (s; NaN when its stamp was unusable).
_SEND, _RESPONSE, _BUDGET, _OK, _OUTCOME, _AGE = range(6)
_OUTCOME_CODES = {outcome: float(code) for code, outcome in enumerate(Outcome)}


@dataclass
class _Book:
    keep: int
    records: FloatRing = field(init=False)
    live: int = 0
    last_error: str = ""

    def __post_init__(self) -> None:
        self.records = FloatRing(6, self.keep)


class ServingLedger:
    """Answered requests and live counts of a fixed set of robots.

    Args:
        robots: The robots served (the allowlist).
        keep: Records kept per robot.
    """

    def __init__(self, robots: Iterable[str], keep: int = RECORDS_PER_ROBOT) -> None:
        self._lock = threading.Lock()
        self._books = {name: _Book(keep) for name in robots}
        self._held = 0
        self._held_s = 0.0

    def submitted(self, robot: str) -> None:
        """A request of ``robot`` went to the engine."""
        with self._lock:
            self._books[robot].live += 1

    def answered(self, robot: str) -> None:
        """The engine answered one of ``robot``'s requests."""
        with self._lock:
            self._books[robot].live -= 1

    def live(self, robot: str) -> int:
        """Requests of ``robot`` the engine holds now."""
        with self._lock:
            return self._books[robot].live

    def record(self, robot: str, record: ResponseRecord, outcome: Outcome, *,
               reason: str = "", hold_s: float = 0.0, age: float = math.nan) -> None:
        """A chunk went out to ``robot``.

        Args:
            robot: The robot.
            record: Its request's arrival, the publication time and the budget.
            outcome: How it counts.
            reason: Why it failed (kept as the robot's last error).
            hold_s: How long phase spreading held it (s).
            age: The request's age when it arrived (s; :func:`request_age`), NaN when
                unknown.
        """
        with self._lock:
            book = self._books[robot]
            response = math.nan if record.response_time is None else record.response_time
            book.records.append((record.send_time, response, record.budget, float(record.ok),
                                 _OUTCOME_CODES[outcome], age))
            if outcome is Outcome.FAILED:
                book.last_error = reason
            if hold_s > 0:
                self._held += 1
                self._held_s += hold_s

    def last_error(self, robot: str) -> str:
        """The reason of ``robot``'s latest failed chunk ("" when none)."""
        with self._lock:
            return self._books[robot].last_error

    def held(self) -> tuple[int, float]:
        """Chunks published after a phase-spreading hold, and their total hold (s)."""
        with self._lock:
            return self._held, self._held_s

    def active(self, now: float, window_s: float) -> list[str]:
        """Robots with a request that arrived in the last ``window_s`` before ``now``."""
        since = now - window_s
        with self._lock:
            lasts = {name: b.records.last() for name, b in self._books.items()}
        return [name for name, last in lasts.items()
                if last is not None and last[_SEND] >= since]

    def summaries(self, now: float, window_s: float) -> tuple[list[RobotSummary], RobotSummary]:
        """Each robot's figures, and the fleet's, over a window of arrivals.

        Args:
            now: The window's end (the clock of the records).
            window_s: Its length (s).
        """
        window = (now - window_s, now + 1e-9)
        with self._lock:
            books = {name: (b.records.rows(), b.live) for name, b in self._books.items()}
        robots = [_summary(name, rows, window, window_s, live)
                  for name, (rows, live) in books.items()]
        everything = np.concatenate([rows for rows, _ in books.values()]) if books \
            else np.empty((0, 6))
        total = _summary("*", everything, window, window_s,
                         sum(live for _, live in books.values()))
        return robots, total


def _summary(name: str, rows: np.ndarray, window: tuple[float, float],
             window_s: float, live: int) -> RobotSummary:
    chosen = rows[(window[0] <= rows[:, _SEND]) & (rows[:, _SEND] < window[1])]
    answered = np.isfinite(chosen[:, _RESPONSE])
    latency = np.where(answered, chosen[:, _RESPONSE] - chosen[:, _SEND], math.inf)
    ok = (chosen[:, _OK] == 1.0) & answered
    budget = chosen[:, _BUDGET]
    # The ledger's records carry no robot index (one robot per book): one, as before.
    m = summarize_arrays(RecordArrays(chosen[:, _SEND], latency, budget, ok,
                                      robots=1 if len(chosen) else 0), window)
    age = chosen[:, _AGE]
    stamped = np.isfinite(age)
    ages = age[stamped] * MS_PER_S
    age_p50, age_p99 = nan_percentiles(ages, (50, 99))
    outcomes = chosen[:, _OUTCOME]
    return RobotSummary(
        robot_id=name, requests=m.requests, on_time=m.on_time,
        attainment=m.attainment if m.requests else math.nan,
        on_time_goodput_hz=m.on_time / window_s,
        latency_p50_ms=m.latency_p50_ms, latency_p95_ms=m.latency_p95_ms,
        latency_p99_ms=m.latency_p99_ms, mean_wide_latency_ms=m.mean_wide_latency_ms,
        errors=int(np.count_nonzero(outcomes == _OUTCOME_CODES[Outcome.FAILED])),
        shed=int(np.count_nonzero(outcomes == _OUTCOME_CODES[Outcome.SHED])),
        queue_depth=max(0, live),
        request_age_p50_ms=age_p50,
        request_age_p99_ms=age_p99,
        # Measured from the robot's stamp: the request's age at the callback plus the
        # server's span, against the budget (core.timing.budget_met).
        stamp_attainment=(float(np.mean(ok[stamped] & budget_met(
            age[stamped] + latency[stamped], budget[stamped]))) if len(ages) else math.nan))


def request_age(now_ns: int, stamp_ns: int, max_skew_s: float) -> float:
    """A request's age (s) from its stamp, or NaN where the clocks do not allow it.

    Args:
        now_ns: The server's clock when the callback took the request (ns).
        stamp_ns: The request's header stamp, the robot's send time (ns; 0: unset).
        max_skew_s: Largest clock difference believed: an age below ``-max_skew_s``
            (a stamp from the future) or above one hour means clocks of different
            kinds (simulated and wall time) or unsynchronised machines.

    Returns:
        The age in seconds (a small negative one, within the skew, as 0), or NaN.
    """
    if stamp_ns <= 0:
        return math.nan
    age = (now_ns - stamp_ns) / 1e9
    if age < -max_skew_s or age > _MAX_BELIEVED_AGE_S:
        return math.nan
    return max(age, 0.0)


#: An older stamp is taken for a clock of another kind, not for a queued request.
_MAX_BELIEVED_AGE_S = 3600.0
