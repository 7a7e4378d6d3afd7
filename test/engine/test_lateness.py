"""Lateness by budget class: where late and on-time requests spent their server time."""

from __future__ import annotations

import math

import pytest

from xinfer_ros.engine.closed_loop import Sent
from xinfer_ros.engine.lateness import PARTS, lateness
from xinfer_ros.engine.types import EngineResult, StageTimings, Status


def sent(t: float, budget: float, latency: float | None, *, queue: float = 0.0,
         lane: float = 0.0, action: float = 40.0, batch: int = 1,
         status: Status = Status.OK) -> Sent:
    timings = StageTimings(queue_ms=queue, lane_ms=lane, action_ms=action, action_batch=batch)
    result = None if latency is None else EngineResult(0, "r", status, timings=timings)
    return Sent(0, t, budget, result, None if latency is None else t + latency)


def test_late_and_on_time_requests_are_split_by_budget_and_part():
    rows = lateness([
        sent(1.0, 0.09, 0.080, queue=10.0),                      # on time
        sent(2.0, 0.09, 0.120, lane=30.0, action=60.0, batch=3),  # late: lane and batch
        sent(3.0, 0.09, 0.100, queue=50.0),                      # late: ready queue
        sent(4.0, 0.09, None),                                   # unanswered: late
        sent(5.0, 0.09, 0.050, status=Status.SHED),              # refused: late
        sent(6.0, 0.40, 0.200, queue=150.0, batch=2),            # on time
        sent(0.5, 0.09, 0.500),                                  # before the window
    ], (1.0, 10.0))
    assert list(rows) == ["90", "400"]
    tight = rows["90"]
    assert (tight["requests"], tight["late"]) == (5, 4)
    # Means over the late ones the engine answered (the unanswered one has no timings).
    assert tight["late_ms"]["queue"] == pytest.approx(50.0 / 3)
    assert tight["late_ms"]["lane"] == pytest.approx(10.0)
    assert tight["late_ms"]["action"] == pytest.approx((60.0 + 40.0 + 40.0) / 3)
    assert tight["late_batched"] == pytest.approx(1 / 3)
    assert tight["on_time_ms"]["queue"] == 10.0 and tight["on_time_batched"] == 0.0
    assert math.isnan(tight["late_ms"]["vit"])  # no request reported a ViT time
    wide = rows["400"]
    assert (wide["requests"], wide["late"], wide["on_time_batched"]) == (1, 0, 1.0)
    assert all(math.isnan(wide["late_ms"][p]) for p in PARTS) and math.isnan(wide["late_batched"])


def test_an_answer_exactly_at_its_budget_is_on_time():
    row = lateness([sent(1.0, 0.25, 0.25)], (0.0, 2.0))["250"]
    assert row["late"] == 0
