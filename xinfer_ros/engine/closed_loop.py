"""In-process closed-loop robots driving a :class:`StageEngine` (paper Eq. 1).

Each robot has at most one request in flight and sends the next one at
``s_{j+1} = max(s_j + T_E, r_j)``. Budgets follow the simulator's workloads
(``xinfer_ros.sim.workloads``), so the engine benchmark and the simulator replay the
same budget patterns. Transport outside the server is modelled as fixed uplink and
downlink delays (δ = up + down), matching the simulator's ``Link``. Each response
leaves the server at the result's ``release_at``: when it is ready, or later when the
engine's phase spreading holds it, as the ROS server publishes it.
"""

from __future__ import annotations

import functools
import heapq
import itertools
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from xinfer_ros.core.constants import LINK_DELAY, SEND_PERIOD
from xinfer_ros.core.metrics import ResponseRecord
from xinfer_ros.core.timing import next_send
from xinfer_ros.engine.clock import Clock
from xinfer_ros.engine.engine import StageEngine
from xinfer_ros.engine.types import EngineResult

__all__ = ["ClosedLoopRun", "RobotPlan", "Sent", "run_closed_loop"]

#: ``inputs(robot_index, previous_chunk_or_None) -> request inputs``.
InputsFn = Callable[[int, "np.ndarray | None"], Any]


@dataclass(frozen=True, slots=True)
class RobotPlan:
    """One robot of the run.

    Attributes:
        index: robot index (``robot_id`` is ``f"robot{index}"``).
        start: first send time (s, engine clock relative to the run start).
        budget: budget (s) of the robot's k-th request.
        max_requests: stop after this many (None: until the run ends).
    """

    index: int
    start: float
    budget: Callable[[int], float]
    max_requests: int | None = None


@dataclass(slots=True)
class Sent:
    """One request as the robot saw it, plus the engine's result."""

    robot: int
    send_time: float
    budget: float
    result: EngineResult | None = None
    response_time: float | None = None


@dataclass
class ClosedLoopRun:
    """Outcome of :func:`run_closed_loop`; times relative to the run start (s)."""

    sent: list[Sent] = field(default_factory=list)
    duration: float = 0.0

    def records(self) -> list[ResponseRecord]:
        """Client-side records for :func:`xinfer_ros.core.metrics.summarize`."""
        return [ResponseRecord(s.send_time, s.response_time, s.budget,
                               s.result is not None and s.result.ok, s.robot)
                for s in self.sent]


def run_closed_loop(
    engine: StageEngine,
    robots: list[RobotPlan],
    inputs: InputsFn,
    duration: float,
    *,
    period: float = SEND_PERIOD,
    link_up: float = LINK_DELAY,
    link_down: float = LINK_DELAY,
    drain: float = 2.0,
) -> ClosedLoopRun:
    """Drive ``engine`` with closed-loop robots for ``duration`` engine seconds.

    Args:
        engine: a started engine.
        robots: the fleet.
        inputs: builds each request's inputs (RTC from the robot's previous chunk).
        duration: last send time (s); in-flight requests then drain.
        period: T_E (s).
        link_up: robot → server delay (s).
        link_down: server → robot delay (s).
        drain: engine seconds to wait for in-flight requests after ``duration``.

    Returns:
        Every sent request with its result (unanswered ones have none).
    """
    clock = engine.clock
    t0 = clock.now()
    cond = threading.Condition()
    tie = itertools.count()
    heap = _first_submissions(robots, link_up, tie)
    run = ClosedLoopRun()
    sent_count = [0] * len(robots)
    previous: list[np.ndarray | None] = [None] * len(robots)
    in_flight = [0]

    def on_result(i: int, rec: Sent, result: EngineResult) -> None:
        with cond:
            r = result.release_at - t0 + link_down
            rec.result, rec.response_time = result, r
            if result.ok:
                previous[i] = result.actions
            in_flight[0] -= 1
            nxt = next_send(rec.send_time, r, period)
            limit = robots[i].max_requests
            if nxt < duration and (limit is None or sent_count[i] < limit):
                heapq.heappush(heap, (nxt + link_up, next(tie), i))
            cond.notify_all()

    while True:
        with cond:
            now = clock.now() - t0
            if now >= duration:
                break
            if not heap or heap[0][0] > now:
                wake = min(heap[0][0], duration) if heap else duration
                clock.wait(cond, wake - now)
                continue
            t_submit, _, i = heapq.heappop(heap)
            k = sent_count[i]
            sent_count[i] += 1
            rec = Sent(i, t_submit - link_up, robots[i].budget(k))
            run.sent.append(rec)
            in_flight[0] += 1
            prev = previous[i]
        # Outside the lock: an immediate refusal runs the callback on this thread. The
        # request reached the server at t_submit, however late this thread woke.
        engine.submit(inputs(i, prev), rec.budget, f"robot{i}",
                      callback=functools.partial(on_result, i, rec), age=now - t_submit)
    _wait_for_in_flight(clock, cond, in_flight, drain)
    run.duration = duration
    return run


def _first_submissions(
    robots: list[RobotPlan], link_up: float, tie: Iterator[int]
) -> list[tuple[float, int, int]]:
    """The submission heap at the start: (submit time, tiebreak, robot) of each first send."""
    heap = [(plan.start + link_up, next(tie), i) for i, plan in enumerate(robots)]
    heapq.heapify(heap)
    return heap


def _wait_for_in_flight(
    clock: Clock, cond: threading.Condition, in_flight: list[int], drain: float
) -> None:
    """Wait up to ``drain`` engine seconds for the requests still in flight to answer."""
    end = clock.now() + drain
    with cond:
        while in_flight[0] and clock.now() < end:
            clock.wait(cond, 0.01)
