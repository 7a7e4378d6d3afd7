"""Arrival forecaster: budget groups over the window P, start and period."""

from __future__ import annotations

import pytest

from xinfer_ros.core import ArrivalForecaster


def test_forecasts_start_after_last_arrival_and_repeat_every_p_over_k():
    f = ArrivalForecaster(window=0.180)
    for a in (0.00, 0.06, 0.12):          # three 90 ms arrivals: period 60 ms
        f.observe(a, 0.090)
    f.observe(0.10, 0.400)                 # one 400 ms arrival: period 180 ms
    fc = f.forecasts(0.15, 0.30)
    tight = [x.arrival for x in fc if x.budget == 0.090]
    wide = [x.arrival for x in fc if x.budget == 0.400]
    assert tight == pytest.approx([0.18, 0.24, 0.30])
    assert wide == pytest.approx([0.28])
    assert [x.arrival for x in fc] == sorted(x.arrival for x in fc)


def test_overdue_forecast_starts_now_and_window_prunes():
    f = ArrivalForecaster(window=0.180)
    f.observe(0.0, 0.090)
    f.observe(0.01, 0.090)                 # k = 2: period 90 ms, next due at 0.10
    assert [x.arrival for x in f.forecasts(0.15, 0.25)] == pytest.approx([0.15, 0.24])
    # At 0.185 only the 0.01 arrival is left (k = 1): next due 0.19.
    assert [x.arrival for x in f.forecasts(0.185, 0.2)] == pytest.approx([0.19])
    assert f.forecasts(0.191, 1.0) == []  # both arrivals left the window
    assert f.groups(0.191) == []


def test_groups_by_observed_budget_value():
    f = ArrivalForecaster()
    f.observe(0.0, 0.09)
    f.observe(0.01, 0.09 + 1e-9)  # float noise: same group
    f.observe(0.02, 0.12)
    groups = sorted(f.groups(0.05))
    assert [(round(b, 3), k) for b, k, _ in groups] == [(0.09, 2), (0.12, 1)]


def test_bad_window():
    with pytest.raises(ValueError, match="window must be > 0 s, got 0"):
        ArrivalForecaster(window=0)


@pytest.mark.parametrize("name", ["fifo", "edf", "slack_gate", "xinfer", "xinfer_no_arrival"])
def test_arrival_history_stays_bounded_over_an_hour_for_every_policy(name: str) -> None:
    """Every policy feeds the forecaster; none may let it grow with the run's length."""
    from xinfer_ros.core import Request, Stage, make_policy

    policy = make_policy(name)
    period, robots = 0.18, 2
    rid = 0
    for tick in range(int(3600 / period)):  # an hour of Eq. 1 sends from 2 robots
        base = tick * period
        for robot in range(robots):
            rid += 1
            t = base + robot * period / robots
            budget = 0.09 if (tick // 30 + robot) % 2 else 0.4
            policy.on_arrival(Request(rid, f"r{robot}", arrival=t, budget=budget), t)
            for stage in (Stage.VIT, Stage.PREFILL, Stage.ACTION):
                policy.on_complete(rid, stage, t)
        stored = sum(len(times) for _, times in policy.forecaster._groups.values())
        assert stored <= robots * 2, (name, tick, stored)
    assert policy.requests == {}


def test_an_arrival_reported_late_takes_its_place() -> None:
    in_order, late = ArrivalForecaster(window=1.0), ArrivalForecaster(window=1.0)
    for t in (0.10, 0.20, 0.30):
        in_order.observe(t, 0.09)
    for t in (0.10, 0.30, 0.20):  # two CPU workers finished preparing out of order
        late.observe(t, 0.09)
    assert late.groups(0.35) == in_order.groups(0.35)
    assert late.forecasts(0.35, 1.0) == in_order.forecasts(0.35, 1.0)
