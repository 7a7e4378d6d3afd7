"""Workloads: budget patterns, staggering, bursty groups, parcel traces, custom input."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from xinfer_ros.core.constants import SEND_PERIOD as T_E
from xinfer_ros.sim.workloads import (
    CyclicBudgets,
    build_workload,
    load_parcel_traces,
)


def test_phases_alternate_every_30_and_are_staggered() -> None:
    wl = build_workload("phases", 10, seed=1)
    assert wl.budget_values() == (0.09, 0.4)
    r0 = wl.robots[0].budgets
    assert [r0(k) for k in (0, 29, 30, 59, 60)] == [0.09, 0.09, 0.4, 0.4, 0.09]
    # At any response index about half of the robots are tight.
    for k in (0, 17, 45):
        tight = sum(r.budgets(k) == 0.09 for r in wl.robots)
        assert tight == 5
    starts = [r.start for r in wl.robots]
    assert starts == sorted(starts) and starts[-1] < T_E + 0.001


def test_multi_budget_cycles_five_budgets() -> None:
    wl = build_workload("multi_budget", 15)
    b = wl.robots[0].budgets
    assert [b(30 * i) for i in range(6)] == [0.08, 0.12, 0.16, 0.25, 0.4, 0.08]


def test_bursty_adds_two_groups_of_six_with_55_requests() -> None:
    wl = build_workload("bursty", 12)
    groups = [r.tag for r in wl.robots]
    assert groups.count("base") == 12
    burst = [r for r in wl.robots if r.tag != "base"]
    assert len(burst) == 12 and all(r.max_requests == 55 for r in burst)
    assert all(r.budgets(k) == 0.09 for r in burst for k in range(55))
    assert sorted({round(r.start) for r in burst}) == [60, 120]
    assert len({r.robot_id for r in wl.robots}) == 24


def test_parcel_traces_tight_share_and_all_tight_intervals() -> None:
    episodes = load_parcel_traces()
    assert len(episodes) == 23
    for n in (10, 14, 18, 20):
        wl = build_workload("parcel", n, seed=3)
        k = np.arange(1200)
        tight = np.array([[r.budgets(int(i)) == 0.09 for i in k] for r in wl.robots])
        assert 0.60 <= tight.mean() <= 0.64, (n, tight.mean())
        share = tight.mean(axis=0)
        assert share.max() >= 0.85 and share.min() <= 0.35


def test_custom_budgets_and_csv(tmp_path: Path) -> None:
    wl = build_workload("custom", 4, budgets_ms=[100, 200, 300], phase_length=5)
    assert wl.budget_values() == (0.1, 0.2, 0.3)
    assert isinstance(wl.robots[0].budgets, CyclicBudgets)
    csv = tmp_path / "b.csv"
    csv.write_text("r0,r1\n90,400\n90,400\n400,\n")
    wl = build_workload("custom", 3, budget_csv=csv)
    assert wl.robots[1].budgets(0) == 0.4
    assert {wl.robots[0].budgets(k) for k in range(3)} == {0.09, 0.4}
    with pytest.raises(ValueError, match="needs budgets"):
        build_workload("custom", 2)
    with pytest.raises(ValueError, match="unknown workload"):
        build_workload("nope", 2)
    with pytest.raises(ValueError, match="robots"):
        build_workload("phases", 0)


def test_uniform_is_uniform() -> None:
    wl = build_workload("uniform", 3, budgets_ms=[150])
    assert wl.uniform_budget and wl.budget_values() == (0.15,)


def test_seed_changes_starts_only_slightly() -> None:
    a = build_workload("phases", 5, seed=1)
    b = build_workload("phases", 5, seed=2)
    assert [r.start for r in a.robots] != [r.start for r in b.robots]
    assert max(abs(x.start - y.start) for x, y in zip(a.robots, b.robots, strict=True)) < 0.001
