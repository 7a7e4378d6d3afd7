"""Interleaved arms: the plan, the pinning thread and the cycle-by-cycle comparison."""

from __future__ import annotations

import collections
import itertools
import math
import threading

import pytest

from xinfer_ros.core.metrics import ResponseRecord
from xinfer_ros.engine.clock import Clock
from xinfer_ros.engine.interleave import (
    InterleaveError,
    Segment,
    SegmentPinner,
    arm_labels,
    interleaved_figures,
    plan_segments,
)
from xinfer_ros.engine.speed_adjust import student_t975


def test_the_plan_is_whole_cycles_each_taking_the_next_order_of_the_arms() -> None:
    segs = plan_segments(("off", "on", "auto"), 10.0, 10.0 + 6 * 3 * 6.0, 6.0)
    assert len(segs) == 18
    assert [s.start for s in segs] == [10.0 + 6.0 * i for i in range(18)]
    assert all(s.end == s.start + 6.0 for s in segs)
    orders = [tuple(s.arm for s in segs if s.cycle == c) for c in range(6)]
    assert sorted(orders) == sorted(itertools.permutations(("off", "on", "auto")))
    # Over every order once, each arm follows each other arm as often (within cycles).
    follows = collections.Counter((a, b) for o in orders for a, b in itertools.pairwise(o))
    assert set(follows.values()) == {2} and len(follows) == 6


def test_an_arm_given_twice_is_numbered_for_an_a_a_check() -> None:
    assert arm_labels(("off", "off", "on")) == ["off", "off2", "on"]
    segs = plan_segments(("off", "off"), 0.0, 24.0, 6.0)
    assert [s.arm for s in segs] == ["off", "off2", "off2", "off"]
    assert [s.mode for s in segs] == ["off"] * 4


@pytest.mark.parametrize(("modes", "start", "end", "length", "match"), [
    (("off",), 0.0, 12.0, 6.0, "two arms"),
    (("off", "fast"), 0.0, 24.0, 6.0, "unknown interleaved arm 'fast'"),
    (("off", "on"), 0.0, 25.0, 6.0, "whole cycles"),
    (("off", "on"), 0.0, 12.0, 6.0, "two or more"),
    (("off", "on"), 0.0, 24.0, 0.0, "segment length"),
    (("off", "on"), 0.0, 24.0, math.nan, "segment length"),
])
def test_a_plan_that_cannot_be_followed_is_refused(modes: tuple[str, ...], start: float,
                                                   end: float, length: float,
                                                   match: str) -> None:
    with pytest.raises(InterleaveError, match=match):
        plan_segments(modes, start, end, length)


def _records(segs: list[Segment], per_segment: int, on_time: dict[tuple[str, int], int],
             offset: float = 0.0) -> list[ResponseRecord]:
    """``per_segment`` requests evenly over each segment (from ``offset`` s into it), the
    first ``on_time[(arm, cycle)]`` answered in budget, the rest too late."""
    out = []
    for s in segs:
        span = s.end - s.start - offset
        for i in range(per_segment):
            t = s.start + offset + span * i / per_segment
            late = i >= on_time[(s.arm, s.cycle)]
            out.append(ResponseRecord(t, t + (0.2 if late else 0.05), 0.1))
    return out


def test_each_request_counts_for_its_segment_after_the_settling_time() -> None:
    segs = plan_segments(("off", "on"), 10.0, 34.0, 6.0)
    good = {(s.arm, s.cycle): 10 for s in segs}
    records = _records(segs, 10, good, offset=1.0)
    # Late requests in each segment's first second, and outside the segments: not counted.
    records += [ResponseRecord(s.start + 0.5, s.start + 5.0, 0.1) for s in segs]
    records += [ResponseRecord(5.0, 9.0, 0.1), ResponseRecord(34.0, 39.0, 0.1)]
    rep = interleaved_figures(records, segs, settle=1.0, tolerance=2.0)
    assert rep.cycles == 2 and rep.segment_s == 6.0
    for arm in rep.arms:
        assert (arm.requests, arm.on_time, arm.attainment) == (20, 20, 1.0)
        assert arm.seconds == pytest.approx(10.0)
        assert arm.goodput_rps == pytest.approx(2.0)
        assert arm.per_cycle == (100.0, 100.0)


def test_the_arms_are_compared_cycle_by_cycle_with_students_t() -> None:
    segs = plan_segments(("off", "on", "auto"), 0.0, 4 * 3 * 5.0, 5.0)
    # Per cycle, of 20 requests: off keeps 16 + c, on 18 + c (host drift c moves both),
    # auto keeps on's but one in cycles 0 and 2.
    good = {}
    for c in range(4):
        good[("off", c)] = 12 + c
        good[("on", c)] = 14 + c
        good[("auto", c)] = 14 + c - (c % 2 == 0)
    rep = interleaved_figures(_records(segs, 20, good), segs, settle=0.0, tolerance=2.0)
    diffs = {(d.arm, d.other): d for d in rep.differences}
    assert set(diffs) == {("on", "off"), ("auto", "off"), ("auto", "on")}
    on_off = diffs[("on", "off")]
    # The drift cancels: +10 points in every cycle, no spread.
    assert on_off.cycles == 4
    assert (on_off.mean, on_off.median) == pytest.approx((10.0, 10.0))
    assert on_off.se == pytest.approx(0.0, abs=1e-9)
    assert on_off.verdict == "holds"
    auto_on = diffs[("auto", "on")]
    # -5, 0, -5, 0 points: mean -2.5, sd 2.887, se 1.443, t(3) = 3.182.
    assert auto_on.mean == pytest.approx(-2.5)
    assert auto_on.se == pytest.approx(math.sqrt(25 / 3) / 2)
    assert auto_on.half_width == pytest.approx(3.182 * auto_on.se)
    assert auto_on.verdict == "undecided (short)"
    text = "\n".join(rep.lines())
    assert "auto - on: -2.50 +- 4.59 points (95 %, t over 4 cycles" in text
    assert rep.to_dict()["differences"][0]["arm"] == "on"


def test_a_cycle_without_requests_of_an_arm_drops_out_of_its_differences() -> None:
    segs = plan_segments(("off", "on"), 0.0, 3 * 2 * 4.0, 4.0)
    records = [r for r in _records(segs, 4, {(s.arm, s.cycle): 4 for s in segs})
               if not (r.send_time >= 8.0 and r.send_time < 16.0)]  # cycle 1 silent
    rep = interleaved_figures(records, segs, settle=0.0, tolerance=2.0)
    assert all(math.isnan(a.per_cycle[1]) for a in rep.arms)
    (d,) = rep.differences
    assert d.cycles == 2 and d.mean == 0.0


def test_a_settling_time_as_long_as_a_segment_is_refused() -> None:
    segs = plan_segments(("off", "on"), 0.0, 24.0, 6.0)
    with pytest.raises(InterleaveError, match="settle"):
        interleaved_figures([], segs, settle=6.0, tolerance=2.0)


def test_the_pinner_pins_each_segment_at_its_start_and_hands_back_at_the_end() -> None:
    clock = Clock(10.0)  # 10 engine seconds a wall second
    segs = plan_segments(("off", "on", "auto"), 1.0, 1.0 + 2 * 3 * 2.0, 2.0)
    pins: list[tuple[float, bool | None]] = []
    done = threading.Event()

    def pin(value: bool | None) -> None:
        pins.append((clock.now() - t0, value))
        if len(pins) == len(segs) + 1:
            done.set()

    t0 = clock.now()
    pinner = SegmentPinner(clock, pin, segs, t0)
    pinner.start()
    assert done.wait(5.0)
    pinner.stop()
    want = [{"off": False, "on": True, "auto": None}[s.mode] for s in segs] + [None, None]
    assert [v for _, v in pins] == want  # the last: stop() hands back again
    for (t, _), s in zip(pins, segs, strict=False):
        assert s.start - 0.01 <= t < s.start + 1.0  # within 100 ms of wall time


def test_a_pinner_stopped_early_hands_the_verdict_back() -> None:
    clock = Clock(1.0)
    segs = plan_segments(("off", "on"), 100.0, 124.0, 6.0)
    pins: list[bool | None] = []
    pinner = SegmentPinner(clock, pins.append, segs, clock.now())
    pinner.start()
    pinner.stop()
    assert pins == [None]


def test_students_t_quantiles() -> None:
    assert student_t975(1) == 12.706
    assert student_t975(5) == 2.571
    assert student_t975(30) == student_t975(100) == 2.042
    with pytest.raises(ValueError, match="degrees of freedom"):
        student_t975(0)


def test_host_speed_that_moves_within_a_cycle_is_fitted_out_segment_by_segment() -> None:
    """Both arms keep the same share at one speed; the host's speed jumps from segment
    to segment, so the cycle-by-cycle differences scatter, and the common-slope fit over
    the segments finds no difference between the arms."""
    segs = plan_segments(("off", "on"), 0.0, 6 * 2 * 5.0, 5.0)
    probe = [1.0 + 0.1 * ((i * 7) % 5) for i in range(len(segs))]  # 1.0-1.4 ms
    # 100 requests a segment; in budget: 90 at 1.0 ms, fewer on a slower host.
    good = {(s.arm, s.cycle): round(90 - 100 * math.log(ms))
            for s, ms in zip(segs, probe, strict=True)}
    rep = interleaved_figures(_records(segs, 100, good), segs, settle=0.0, tolerance=2.0,
                              probe_ms=probe)
    (raw,) = rep.differences
    assert raw.se > 3.0  # the speed's jumps land in the pairs
    fit = rep.speed_fit
    assert fit is not None and fit.segments == 12 and fit.dof == 9
    assert fit.slope == pytest.approx(-100.0, abs=2.0)
    assert fit.residual_sd < 0.5
    assert fit.raw_sd > 5.0
    (d,) = fit.differences
    assert (d.arm, d.other) == ("on", "off")
    assert d.difference == pytest.approx(0.0, abs=0.5)
    assert d.half_width == pytest.approx(student_t975(9) * d.se)
    assert d.verdict == "holds"
    assert rep.arms[0].per_cycle_probe_ms[0] == probe[0]
    assert "at one host speed (12 segments" in "\n".join(rep.lines())
    assert rep.to_dict()["speed_fit"]["differences"][0]["verdict"] == "holds"


def test_without_a_probe_there_is_no_fit_and_probe_times_must_match_the_segments() -> None:
    segs = plan_segments(("off", "on"), 0.0, 20.0, 5.0)
    records = _records(segs, 4, {(s.arm, s.cycle): 3 for s in segs})
    rep = interleaved_figures(records, segs, settle=0.0, tolerance=2.0)
    assert rep.speed_fit is None and "speed_fit" not in rep.to_dict()
    assert all(a.per_cycle_probe_ms == () for a in rep.arms)
    # Too few segments with a probe time to fit two levels and a slope: no fit.
    rep = interleaved_figures(records, segs, settle=0.0, tolerance=2.0,
                              probe_ms=[1.0, math.nan, 1.1, 1.2])
    assert rep.speed_fit is None
    with pytest.raises(InterleaveError, match="3 probe times for 4 segments"):
        interleaved_figures(records, segs, settle=0.0, tolerance=2.0, probe_ms=[1.0] * 3)
