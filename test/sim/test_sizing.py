"""Sizing a site from one server's simulated capacity."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from xinfer_ros.core.metrics import WindowMetrics
from xinfer_ros.sim.erc import Criterion
from xinfer_ros.sim.sizing import plan_site, shares


def _metrics(ok: bool) -> WindowMetrics:
    return WindowMetrics(requests=100, responses=100, errors=0, on_time=100 if ok else 80,
                         attainment=1.0 if ok else 0.8, goodput_rps=1.0, throughput_rps=1.0,
                         latency_p50_ms=10.0, latency_p95_ms=10.0, latency_p99_ms=10.0,
                         latency_mean_ms=10.0, mean_wide_latency_ms=10.0, wide_budget_ms=400.0)


def _server(capacity: int, holes: frozenset[int] = frozenset()):
    """A server that passes up to ``capacity`` robots, except at ``holes``."""
    calls: list[int] = []

    def evaluate(n: int) -> list[WindowMetrics]:
        calls.append(n)
        return [_metrics(n <= capacity and n not in holes)] * 3

    return evaluate, calls


def test_shares_deal_robots_round_robin() -> None:
    assert shares(25, 3) == (9, 8, 8)
    assert shares(30, 2) == (15, 15)
    assert shares(3, 5) == (1, 1, 1)
    with pytest.raises(ValueError, match="robots >= 1"):
        shares(0, 2)


def test_a_fleet_needs_ceil_n_over_erc_servers_when_every_share_passes() -> None:
    evaluate, calls = _server(10)
    plan = plan_site(25, evaluate, Criterion.ATTAINMENT, lo=4, hi=20)
    assert (plan.erc, plan.servers, plan.shares) == (10, 3, (9, 8, 8))
    assert calls == [4, 5, 6, 7, 8, 9, 10, 11]  # the walk; 9 and 8 are not rerun
    assert plan.verdicts[9] == [True] * 3


def test_a_share_that_fails_below_the_erc_adds_a_server() -> None:
    # Passing is not monotone: 9 robots fail though 10 pass; a patient walk finds 10.
    evaluate, _ = _server(10, holes=frozenset({9}))
    plan = plan_site(25, evaluate, Criterion.ATTAINMENT, lo=4, hi=20, patience=2)
    assert plan.erc == 10 and plan.servers == 4 and plan.shares == (7, 6, 6, 6)


def test_no_plan_when_one_server_serves_nobody() -> None:
    evaluate, _ = _server(0)
    plan = plan_site(25, evaluate, Criterion.ATTAINMENT, lo=4, hi=8)
    assert plan.erc == 0 and plan.servers is None


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_plan_command_sizes_a_site_from_the_simulator(tmp_path: Path) -> None:
    from xinfer_ros.cli.sim import main

    out = tmp_path / "plan.json"
    code = main(["plan", "--robots", "30", "--workload", "phases", "--search", "14-22",
                 "--rounds", "1", "--duration", "40", "--warmup", "10", "--quiet",
                 "--json", str(out)])
    data = json.loads(out.read_text())
    assert code == 0 and data["erc"] >= 14, data
    least = -(-30 // data["erc"])  # ceil(N / ERC)
    assert data["servers"] >= least and sum(data["shares"]) == 30
    assert len(data["shares"]) == data["servers"]
    assert all(all(data["verdicts"][str(n)]) for n in set(data["shares"]))


@pytest.mark.slow
@pytest.mark.extended
@pytest.mark.timeout(180)
def test_plan_calibrates_the_prediction_error_on_the_counts_it_walks(tmp_path: Path,
                                                                     capsys) -> None:
    from xinfer_ros.cli.sim import main

    out = tmp_path / "plan.json"
    main(["plan", "--robots", "60", "--workload", "phases", "--search", "16-18",
          "--rounds", "1", "--duration", "20", "--warmup", "5", "--quiet",
          "--predictor-error-ms", "2", "--json", str(out)])
    data = json.loads(out.read_text())
    # Calibrated on one server at the middle of 16-18, not at the fleet's 60 robots.
    assert data["prediction_error"]["robots"] == 17
    assert data["prediction_mae_ms"] and all(
        1.0 < m < 3.0 for m in data["prediction_mae_ms"].values())
    assert "running-stage prediction MAE" in capsys.readouterr().out
