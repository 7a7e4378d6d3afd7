"""The engine's closed loop runs the same Eq. 1 robots as the simulator."""

from __future__ import annotations

import itertools

import pytest

from xinfer_ros.core.clients import Link, RobotSpec
from xinfer_ros.core.constants import SEND_PERIOD
from xinfer_ros.engine.closed_loop import run_closed_loop
from xinfer_ros.sim.workloads import CyclicBudgets

from .helpers import make_engine


@pytest.mark.timeout(60)
def test_robots_keep_eq1_their_limit_and_one_record_per_request() -> None:
    engine, backend = make_engine("fifo")
    link = Link(0.003, 0.001)
    robots = [RobotSpec(i, 0.02 * i, CyclicBudgets((0.09, 0.4), 2), max_requests=limit)
              for i, limit in enumerate((None, 5, None))]
    try:
        run = run_closed_loop(engine, robots, backend.example_inputs, 2.0, link=link)
    finally:
        engine.close(drain_timeout=2.0)
    by_robot = {i: [s for s in run.sent if s.robot == i] for i in range(3)}
    assert len(by_robot[1]) == 5  # the request limit
    for i, sent in by_robot.items():
        assert sent[0].send_time >= robots[i].start
        # Budgets follow the schedule, request by request.
        assert [s.budget for s in sent] == [robots[i].budgets(k) for k in range(len(sent))]
        for prev, nxt in itertools.pairwise(sent):
            assert prev.response_time is not None and prev.result is not None
            # Eq. 1: never before T_E after the previous send, nor before its response
            # (the engine clock's wake-up may add a little, never take any away).
            assert nxt.send_time >= max(prev.send_time + SEND_PERIOD,
                                        prev.response_time) - 1e-9
            # Both links lie between a send and its response.
            assert prev.response_time - prev.send_time > link.delta
    assert len(run.records) == len(run.sent)
    assert [r.send_time for r in run.records] == sorted(s.send_time for s in run.sent)


@pytest.mark.timeout(60)
def test_an_answer_after_the_drain_leaves_the_records_alone() -> None:
    engine, backend = make_engine("fifo")
    # 24 robots saturate the emulated GPU: requests are in flight at any moment.
    robots = [RobotSpec(i, 0.0075 * i, CyclicBudgets((0.4,), 1)) for i in range(24)]
    try:
        # No drain: the requests in flight at the end are answered after the run.
        run = run_closed_loop(engine, robots, backend.example_inputs, 1.0, drain=0.0)
        before = list(run.records)
    finally:
        engine.close(drain_timeout=2.0)
    late = [s for s in run.sent if s.result is not None and s.response_time is None]
    assert before == run.records
    unanswered = [r for r in run.records if r.response_time is None]
    assert unanswered and all(not r.ok for r in unanswered)
    assert len(run.records) == len(run.sent)
    assert not late  # a late answer is not booked on the request either
