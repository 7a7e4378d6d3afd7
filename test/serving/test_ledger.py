"""The serving ledger: per-robot statistics without ROS."""

from __future__ import annotations

import math
import sys
import threading

import pytest

from xinfer_ros.core.metrics import ResponseRecord
from xinfer_ros.serving.ledger import Outcome, ServingLedger, request_age


def _record(arrival: float, latency: float, budget: float = 0.2,
            ok: bool = True) -> ResponseRecord:
    return ResponseRecord(arrival, arrival + latency, budget, ok)


def test_summaries_count_each_outcome_in_the_window_only() -> None:
    ledger = ServingLedger(["a", "b"])
    ledger.record("a", _record(95.0, 0.1), Outcome.OK)
    ledger.record("a", _record(96.0, 0.3), Outcome.OK)  # late: not on time
    ledger.record("a", _record(97.0, 0.0, ok=False), Outcome.SHED)
    ledger.record("b", _record(98.0, 0.0, ok=False), Outcome.FAILED, reason="bad image")
    ledger.record("b", _record(50.0, 0.1), Outcome.OK)  # before the window
    robots, total = ledger.summaries(now=100.0, window_s=10.0)
    a, b = robots
    assert (a.robot_id, a.requests, a.on_time, a.shed, a.errors) == ("a", 3, 1, 1, 0)
    assert a.attainment == pytest.approx(1 / 3)
    assert a.on_time_goodput_hz == pytest.approx(0.1)
    assert (b.requests, b.errors, b.on_time) == (1, 1, 0)
    assert (total.robot_id, total.requests, total.on_time, total.errors, total.shed) == \
        ("*", 4, 1, 1, 1)
    assert ledger.last_error("b") == "bad image" and ledger.last_error("a") == ""


def test_a_robot_without_requests_has_no_attainment_and_live_counts_its_queue() -> None:
    ledger = ServingLedger(["a"])
    ledger.submitted("a")
    ledger.submitted("a")
    ledger.answered("a")
    (a,), total = ledger.summaries(now=10.0, window_s=5.0)
    assert a.requests == 0 and math.isnan(a.attainment)
    assert a.queue_depth == 1 and total.queue_depth == 1 and ledger.live("a") == 1


def test_holds_are_counted_and_the_ring_is_bounded() -> None:
    ledger = ServingLedger(["a"], keep=8)
    for i in range(20):
        ledger.record("a", _record(float(i), 0.1), Outcome.OK, hold_s=0.05 if i % 2 else 0.0)
    assert ledger.held() == (10, pytest.approx(0.5))
    (a,), _ = ledger.summaries(now=100.0, window_s=100.0)
    assert a.requests == 8  # only the newest records are kept


def test_concurrent_recording_loses_nothing() -> None:
    ledger = ServingLedger(["a"])

    def work() -> None:
        for i in range(500):
            ledger.submitted("a")
            ledger.record("a", _record(float(i), 0.1), Outcome.OK, hold_s=0.001)
            ledger.answered("a")

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert ledger.live("a") == 0 and ledger.held()[0] == 2000


def test_active_robots_are_those_with_a_request_in_the_window() -> None:
    ledger = ServingLedger(["a", "b", "c"])
    ledger.record("a", ResponseRecord(10.0, 10.05, 0.2, ok=True), Outcome.OK)
    ledger.record("b", ResponseRecord(7.0, 7.05, 0.2, ok=True), Outcome.OK)
    assert ledger.active(11.0, 2.0) == ["a"]  # b's last request is 4 s old, c has none
    assert ledger.active(11.0, 5.0) == ["a", "b"]


def test_request_age_shows_queueing_before_the_callback() -> None:
    """Server-side latency alone says on time; counted from the robot's stamp it is not."""
    ledger = ServingLedger(["a"])
    # Budget 200 ms, 50 ms in the server: on time for the server. Ages 10 ms and 300 ms.
    ledger.record("a", ResponseRecord(10.0, 10.05, 0.2, ok=True), Outcome.OK, age=0.010)
    ledger.record("a", ResponseRecord(11.0, 11.05, 0.2, ok=True), Outcome.OK, age=0.300)
    ledger.record("a", ResponseRecord(12.0, 12.05, 0.2, ok=True), Outcome.OK)  # no stamp
    [a], _ = ledger.summaries(now=20.0, window_s=15.0)
    assert a.attainment == 1.0 and a.requests == 3
    assert a.stamp_attainment == 0.5  # of the two with a usable stamp
    assert a.request_age_p50_ms == pytest.approx(155.0)
    assert 290.0 < a.request_age_p99_ms <= 300.0
    [b], _ = ServingLedger(["b"]).summaries(now=20.0, window_s=15.0)
    assert math.isnan(b.request_age_p50_ms) and math.isnan(b.stamp_attainment)


@pytest.mark.parametrize(("now_s", "stamp_s", "expected"), [
    (100.0, 99.9, 0.1),            # 100 ms old
    (100.0, 100.02, 0.0),          # 20 ms ahead: within the skew, taken as 0
    (100.0, 100.5, math.nan),      # ahead beyond the skew: another clock
    (1.8e9, 12.0, math.nan),       # wall time against a simulated stamp
    (100.0, 0.0, math.nan),        # unset stamp
])
def test_request_age_is_nan_where_the_clocks_do_not_allow_it(now_s: float, stamp_s: float,
                                                             expected: float) -> None:
    age = request_age(int(now_s * 1e9), int(stamp_s * 1e9), max_skew_s=0.05)
    assert (math.isnan(age) and math.isnan(expected)) or age == pytest.approx(expected)


def test_a_full_ledger_holds_no_more_memory_than_an_empty_one() -> None:
    """Its rings are allocated at start: a soak's memory does not rise as they fill."""
    ledger = ServingLedger(["a", "b"], keep=2048)
    ledger.record("a", _record(0.0, 0.1), Outcome.OK, age=0.001)
    before = sys.getallocatedblocks()
    for i in range(6000):
        ledger.record("ab"[i % 2], _record(float(i), 0.1), Outcome.OK, age=0.001)
    assert sys.getallocatedblocks() - before < 500
    (a, b), total = ledger.summaries(now=6000.0, window_s=6000.0)
    assert (a.requests, b.requests, total.requests) == (2048, 2048, 4096)
