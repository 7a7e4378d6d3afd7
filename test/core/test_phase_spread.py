"""Phase-spreading release: only late responses move, within the deadline, into gaps."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from xinfer_ros.core.errors import InvalidRequestError
from xinfer_ros.core.phase_spread import PhaseSpreader, best_release

T = 0.180


def _circ(x: float, p: float) -> float:
    d = abs(x - p) % T
    return min(d, T - d)


def test_best_release_lands_in_the_widest_gap() -> None:
    # Phases at 0 and 60 ms leave a 120 ms gap; its middle is 120 ms.
    x = best_release(1.0, 1.2, [0.0, 0.060], T, lead=0.0)
    assert (x % T) == pytest.approx(0.120)
    # With a lead of 4 ms the arrival (x + lead) is what lands in the middle.
    x = best_release(1.0, 1.2, [0.0, 0.060], T, lead=0.004)
    assert ((x + 0.004) % T) == pytest.approx(0.120)


def test_best_release_respects_the_window_and_prefers_early() -> None:
    # The gap's middle lies outside the window: the closest allowed point wins.
    x = best_release(1.0, 1.005, [1.0 % T], T, lead=0.0)
    assert x == pytest.approx(1.005)
    # No other robot: release at once.
    assert best_release(2.0, 2.1, [], T, lead=0.004) == 2.0
    # An empty window: release at once.
    assert best_release(2.0, 1.9, [0.05], T, lead=0.004) == 2.0


@given(earliest=st.floats(0.0, 100.0), width=st.floats(0.0, 0.4),
       phases=st.lists(st.floats(0.0, 1000.0), min_size=1, max_size=25))
def test_best_release_is_inside_the_window_and_no_worse_than_any_probe(
        earliest: float, width: float, phases: list[float]) -> None:
    latest = earliest + width
    x = best_release(earliest, latest, phases, T, lead=0.004)
    assert earliest - 1e-9 <= x <= latest + 1e-9
    score = min(_circ(x + 0.004, p) for p in phases)
    for k in range(41):
        probe = earliest + min(width, T) * k / 40
        assert score >= min(_circ(probe + 0.004, p) for p in phases) - 1e-6


def test_responses_within_the_period_are_never_held() -> None:
    sp = PhaseSpreader(period=T, lead=0.004)
    sp.record_arrival("a", 0.0)
    sp.record_arrival("b", 0.010)
    # Ready 100 ms after arrival: the next send stays at s + T_E.
    assert sp.release_time("b", 0.110, 0.010, 0.406) == 0.110
    assert sp.held == 0


def test_a_late_response_is_held_into_a_gap_before_its_deadline() -> None:
    sp = PhaseSpreader(period=T, lead=0.004, margin=0.010)
    for k, a in enumerate((10.000, 10.020, 10.040)):
        sp.record_arrival(f"r{k}", a)
    sp.record_arrival("late", 9.800)
    ready, deadline = 10.030, 9.800 + 0.400 - 0.004
    x = sp.release_time("late", ready, 9.800, deadline)
    assert ready < x <= deadline - 0.010
    # Its next arrival is at least as far from the others as an immediate release.
    others = (10.000, 10.020, 10.040)
    assert min(_circ(x + 0.004, p) for p in others) >= \
        min(_circ(ready + 0.004, p) for p in others)
    assert sp.held == 1 and sp.held_s == pytest.approx(x - ready)
    # The robot's expected next arrival now counts as a phase for the others.
    y = sp.release_time("r0", ready + 0.001, 9.800, deadline)
    assert _circ(y + 0.004, x + 0.004) > 0.030


def test_no_room_before_the_deadline_means_no_hold() -> None:
    sp = PhaseSpreader(period=T, lead=0.004, margin=0.010)
    sp.record_arrival("x", 0.0)
    assert sp.release_time("y", 0.390, 0.0, 0.396) == 0.390


def test_stale_and_forgotten_robots_have_no_phase() -> None:
    sp = PhaseSpreader(period=T, lead=0.0, margin=0.0)
    sp.record_arrival("gone", 0.0)
    sp.record_arrival("left", 100.0)
    sp.forget("left")
    # With no live phase to avoid, a late response goes out at once.
    assert sp.release_time("me", 100.3, 100.0, 100.5) == 100.3


@pytest.mark.parametrize("kwargs", [{"period": 0.0}, {"lead": -0.001}, {"margin": -1.0},
                                    {"period": float("nan")}])
def test_invalid_settings_are_rejected(kwargs: dict[str, float]) -> None:
    with pytest.raises(InvalidRequestError):
        PhaseSpreader(**kwargs)


def test_only_tight_robots_have_phases() -> None:
    sp = PhaseSpreader(period=T, lead=0.0, margin=0.0)
    sp.record_arrival("wide", 10.0, budget=0.400)
    # Nothing to avoid: a late response goes out at once.
    assert sp.release_time("me", 10.3, 10.0, 10.5) == 10.3
    sp.record_arrival("wide", 10.05, budget=0.090)  # the robot switched to tight
    assert sp.release_time("me2", 10.31, 10.0, 10.5) > 10.31
    for robot in ("me", "me2"):  # (their expected next arrivals were recorded)
        sp.forget(robot)
    sp.record_arrival("wide", 10.2, budget=0.400)   # and back: its phase is dropped
    assert sp.release_time("me3", 10.32, 10.0, 10.5) == pytest.approx(10.32)
