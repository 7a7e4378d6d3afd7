"""Metrics: window selection, attainment, goodput, percentiles, round aggregation."""

from __future__ import annotations

import math

import numpy as np
import pytest

from xinfer_ros.core.metrics import (
    ResponseRecord,
    attainment_in_windows,
    attainment_over_time,
    passes_attainment,
    passes_latency,
    summarize,
    summarize_rounds,
)


def _rec(send: float, latency: float | None, budget: float, ok: bool = True) -> ResponseRecord:
    return ResponseRecord(send, None if latency is None else send + latency, budget, ok)


def test_window_is_by_send_time_and_late_responses_count() -> None:
    recs = [
        _rec(29.9, 0.05, 0.09),  # before the window
        _rec(30.0, 0.05, 0.09),  # first in window
        _rec(209.99, 0.5, 0.4),  # sent inside, answered after the window: counted, late
        _rec(210.0, 0.05, 0.09),  # end is exclusive
    ]
    m = summarize(recs, (30.0, 210.0))
    assert m.requests == 2
    assert m.on_time == 1
    assert m.attainment == pytest.approx(0.5)
    assert m.goodput_rps == pytest.approx(1 / 180)
    assert m.throughput_rps == pytest.approx(2 / 180)


def test_errors_and_unanswered_are_misses_and_excluded_from_latency() -> None:
    recs = [_rec(1.0, 0.02, 0.09), _rec(2.0, 0.01, 0.09, ok=False), _rec(3.0, None, 0.09)]
    m = summarize(recs, (0.0, 10.0))
    assert m.requests == 3 and m.responses == 1 and m.errors == 2
    assert m.attainment == pytest.approx(1 / 3)
    assert m.latency_p50_ms == pytest.approx(20.0)
    assert not passes_latency(m)


def test_answer_percentiles_count_refusals_the_robot_waited_for() -> None:
    # A server that sheds after a long wait: chunks alone look fast, the robot did not.
    recs = [_rec(float(i), 0.02, 0.09) for i in range(50)]
    recs += [_rec(100.0 + i, 0.30, 0.09, ok=False) for i in range(50)]
    recs += [_rec(200.0, None, 0.09)]  # unanswered: no answer to time
    m = summarize(recs, (0.0, 1000.0))
    assert m.latency_p99_ms == pytest.approx(20.0)
    assert m.answer_p50_ms == pytest.approx(160.0)
    assert m.answer_p99_ms == pytest.approx(300.0)


def test_percentiles_per_budget_and_wide_latency() -> None:
    lat = np.linspace(0.010, 0.200, 100)
    recs = [_rec(float(i), float(x), 0.09 if i % 2 else 0.4) for i, x in enumerate(lat)]
    m = summarize(recs, (0.0, 1000.0))
    assert m.latency_p50_ms == pytest.approx(float(np.percentile(lat, 50)) * 1000)
    assert m.latency_p99_ms == pytest.approx(float(np.percentile(lat, 99)) * 1000)
    wide = [x for i, x in enumerate(lat) if i % 2 == 0]
    assert m.mean_wide_latency_ms == pytest.approx(float(np.mean(wide)) * 1000)
    assert m.wide_budget_ms == pytest.approx(400.0)
    tight = [x <= 0.09 for i, x in enumerate(lat) if i % 2]
    assert m.per_budget["90"] == pytest.approx(float(np.mean(tight)))
    assert m.per_budget["400"] == pytest.approx(1.0)
    assert set(m.to_dict()) >= {"attainment", "goodput_rps", "throughput_rps",
                                "latency_p50_ms", "latency_p95_ms", "latency_p99_ms",
                                "mean_wide_latency_ms", "per_budget"}


def test_empty_window_is_nan_not_a_crash() -> None:
    m = summarize([], (0.0, 1.0))
    assert m.requests == 0 and math.isnan(m.attainment)
    assert not passes_attainment(m)
    with pytest.raises(ValueError, match="end > start"):
        summarize([], (1.0, 1.0))


def test_round_summary_mean_min_max() -> None:
    a = summarize([_rec(1.0, 0.05, 0.09)], (0.0, 10.0))
    b = summarize([_rec(1.0, 0.20, 0.09)], (0.0, 10.0))
    s = summarize_rounds([a, b])
    assert s.mean["attainment"] == pytest.approx(0.5)
    assert s.minimum["attainment"] == 0.0 and s.maximum["attainment"] == 1.0
    assert s.mean["per_budget.90"] == pytest.approx(0.5)
    with pytest.raises(ValueError):
        summarize_rounds([])


def test_criteria() -> None:
    good = summarize([_rec(float(i), 0.1, 0.2) for i in range(20)], (0.0, 100.0))
    assert passes_attainment(good) and passes_latency(good)
    slow = summarize([_rec(float(i), 0.16, 0.2) for i in range(20)], (0.0, 100.0))
    assert passes_attainment(slow) and not passes_latency(slow)


def test_an_unanswered_request_outside_the_window_fails_both_criteria() -> None:
    recs = [_rec(0.5, None, 0.4)] + [_rec(float(i), 0.05, 0.2) for i in range(10, 30)]
    m = summarize(recs, (10.0, 100.0))
    assert m.attainment == 1.0 and m.errors == 0 and m.unanswered == 1
    assert not passes_attainment(m) and not passes_latency(m)


def test_attainment_over_time_bins() -> None:
    recs = [_rec(0.5, 0.01, 0.09), _rec(1.5, 0.5, 0.09), _rec(2.5, 0.01, 0.09)]
    t, att = attainment_over_time(recs, bin_s=2.0, window=(0.0, 6.0))
    assert list(t) == [0.0, 2.0, 4.0]
    assert att[0] == pytest.approx(0.5) and att[1] == pytest.approx(1.0)
    assert math.isnan(att[2])


def test_attainment_in_windows_pools_the_union_of_windows() -> None:
    records = [_rec(61.0, 0.05, 0.09), _rec(62.0, 0.20, 0.09), _rec(121.0, 0.05, 0.09),
               _rec(100.0, 0.50, 0.09), _rec(140.0, 0.50, 0.09)]
    # 100 s lies outside both windows and 140 s is the open end of the second.
    assert attainment_in_windows(records, [(60.0, 80.0), (120.0, 140.0)]) == pytest.approx(2 / 3)
    assert math.isnan(attainment_in_windows(records, [(0.0, 10.0)]))


def test_control_loop_cost_counts_handoff_misses_and_starvation() -> None:
    from xinfer_ros.core.metrics import HANDOFF_S, STARVATION_S

    assert pytest.approx((0.240, 0.480)) == (HANDOFF_S, STARVATION_S)
    records = [
        ResponseRecord(1.0, 1.100, 0.4, True, 0),   # inside the handoff
        ResponseRecord(2.0, 2.300, 0.4, True, 0),   # past d·Δ, within its budget
        ResponseRecord(3.0, 3.600, 0.4, True, 1),   # past H·Δ too: the robot starved
        ResponseRecord(4.0, None, 0.4, False, 1),   # never answered: starved
        ResponseRecord(5.0, 5.250, 0.4, False, 1),  # failed: no handoff to miss
    ]
    m = summarize(records, window=(0.0, 7200.0))
    assert m.handoff_violations == 2 and m.handoff_violation_rate == pytest.approx(2 / 3)
    assert m.starved == 2
    # Two robots over two hours: 2 starvations / 4 robot-hours.
    assert m.starved_per_robot_hour == pytest.approx(0.5)
    empty = summarize([], window=(0.0, 10.0))
    assert empty.handoff_violations == 0 and math.isnan(empty.handoff_violation_rate)
