"""In-process closed-loop robots driving a :class:`StageEngine` (paper Eq. 1).

The robots are :class:`~xinfer_ros.core.clients.Robot` clients, as in the simulator:
each has at most one request in flight and sends the next one at
``s_{j+1} = max(s_j + T_E, r_j)``. Budgets follow the simulator's workloads
(``xinfer_ros.sim.workloads``), so the engine benchmark and the simulator replay the
same budget patterns, and transport outside the server is the same
:class:`~xinfer_ros.core.clients.Link` (δ = up + down). Each response leaves the
server at the result's ``release_at``: when it is ready, or later when the engine's
phase spreading holds it, as the ROS server publishes it.
"""

from __future__ import annotations

import functools
import heapq
import itertools
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np

from xinfer_ros.core.clients import Link, Robot, RobotSpec
from xinfer_ros.core.constants import SEND_PERIOD
from xinfer_ros.core.metrics import ResponseRecord
from xinfer_ros.engine.clock import Clock
from xinfer_ros.engine.engine import StageEngine
from xinfer_ros.engine.types import EngineResult
from xinfer_ros.model.inputs import RequestInputs

__all__ = ["ClosedLoopRun", "Sent", "run_closed_loop"]

#: ``inputs(robot_index, previous_chunk_or_None) -> request inputs``.
InputsFn = Callable[[int, "np.ndarray | None"], RequestInputs]


@dataclass(slots=True)
class Sent:
    """One request as the robot saw it, plus the engine's result."""

    robot: int
    send_time: float
    budget: float
    result: EngineResult | None = None
    # When the answer reached the robot (s from the run start, as send_time); None:
    # not answered.
    response_time: float | None = None


@dataclass
class ClosedLoopRun:
    """Outcome of :func:`run_closed_loop`; times relative to the run start (s).

    Attributes:
        sent: Every request with the engine's result (none when unanswered).
        records: The robots' client records (unanswered requests last, not OK).
        duration: The last send time.
    """

    sent: list[Sent] = field(default_factory=list)
    records: list[ResponseRecord] = field(default_factory=list)
    duration: float = 0.0


def run_closed_loop(
    engine: StageEngine,
    robots: Sequence[RobotSpec],
    inputs: InputsFn,
    duration: float,
    *,
    period: float = SEND_PERIOD,
    link: Link | None = None,
    drain: float = 2.0,
) -> ClosedLoopRun:
    """Drive ``engine`` with closed-loop robots for ``duration`` engine seconds.

    Args:
        engine: a started engine.
        robots: the fleet; robot i's requests carry ``f"robot{i}"``.
        inputs: builds each request's inputs (RTC from the robot's previous chunk).
        duration: last send time (s); in-flight requests then drain.
        period: T_E (s).
        link: transport delays (default: the paper's δ as two equal halves).
        drain: engine seconds to wait for in-flight requests after ``duration``.

    Returns:
        Every sent request with its result (unanswered ones have none).
    """
    link = Link() if link is None else link
    clock = engine.clock
    t0 = clock.now()
    cond = threading.Condition()
    tie = itertools.count()
    heap = _first_submissions(robots, link.up, tie)
    run = ClosedLoopRun()
    clients = [Robot(spec, period) for spec in robots]
    previous: list[np.ndarray | None] = [None] * len(robots)
    in_flight = [0]
    closed = [False]

    def on_result(i: int, rec: Sent, result: EngineResult) -> None:
        with cond:
            if closed[0]:
                return  # answered after the drain: the robot already counted it unanswered
            r = result.release_at - t0 + link.down
            rec.result, rec.response_time = result, r
            if result.ok:
                previous[i] = result.actions
            in_flight[0] -= 1
            nxt = clients[i].receive(r, rec.budget, result.ok)
            if nxt < duration and clients[i].can_send():
                heapq.heappush(heap, (nxt + link.up, next(tie), i))
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
            send_time = t_submit - link.up
            rec = Sent(i, send_time, clients[i].send(send_time))
            run.sent.append(rec)
            in_flight[0] += 1
            prev = previous[i]
        # Outside the lock: an immediate refusal runs the callback on this thread. The
        # request reached the server at t_submit, however late this thread woke.
        engine.submit(inputs(i, prev), rec.budget, f"robot{i}",
                      callback=functools.partial(on_result, i, rec), age=now - t_submit)
    _wait_for_in_flight(clock, cond, in_flight, drain)
    with cond:
        closed[0] = True
        for client in clients:
            client.close()
            run.records.extend(client.records)
    run.records.sort(key=lambda rec: rec.send_time)
    run.duration = duration
    return run


def _first_submissions(
    robots: Sequence[RobotSpec], link_up: float, tie: Iterator[int]
) -> list[tuple[float, int, int]]:
    """The submission heap at the start: (submit time, tiebreak, robot) of each first send."""
    heap = [(spec.start + link_up, next(tie), i) for i, spec in enumerate(robots)]
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
