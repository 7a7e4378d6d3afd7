"""The planner's band: the simulator's measured error against the real-time engine."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from xinfer_ros.core.metrics import WindowMetrics
from xinfer_ros.sim.engine_band import (
    EngineBand,
    EngineBandError,
    EngineCheck,
    PlanSetting,
    load_band,
)
from xinfer_ros.sim.erc import Criterion
from xinfer_ros.sim.sizing import plan_site

SETTING = PlanSetting(policy="xinfer", workload="phases", provenance="calibrated here",
                      slots=(1, 1, 2), max_batch=1, phase_spread=False)


def _run(path: Path, robots: int, engine: float, simulator: float,
         changes: dict[str, object] | None = None) -> Path:
    """An engine report as ``xinfer-bench engine --compare-sim --json`` writes it."""
    report: dict[str, object] = {
        "benchmark": "engine", "policy": "xinfer", "workload": "phases", "robots": robots,
        "rate_table_provenance": "calibrated here",
        "config": {"slots": [1, 1, 2], "max_batch": 1, "phase_spread": False},
        "metrics": {"attainment": engine},
        "simulator": {"config": "SimConfig", "metrics": {"attainment": simulator}}}
    report.update(changes or {})
    path.write_text(json.dumps(report))
    return path


def test_the_band_spans_the_runs_and_only_its_worse_end_raises_the_target(
        tmp_path: Path) -> None:
    band = load_band([_run(tmp_path / "a.json", 4, 0.60, 0.95),
                      _run(tmp_path / "b.json", 8, 0.99, 0.97),
                      _run(tmp_path / "c.json", 4, 0.90, 0.90)], SETTING)
    assert band.robots == (4, 8)
    assert band.low == pytest.approx(-0.35) and band.high == pytest.approx(0.02)
    # The engine fell 35 points short of the simulator: to promise 95 % the simulator
    # must show 130 %, i.e. no simulated run can pass.
    assert band.target(0.95) == pytest.approx(1.30)
    assert band.to_dict()["low_points"] == pytest.approx(-35.0)
    # An engine that did at least as well as the simulator never relaxes the target.
    better = EngineBand((EngineCheck("x", 4, 0.99, 0.90),))
    assert better.target(0.95) == 0.95


@pytest.mark.parametrize(("changes", "why"), [
    ({"policy": "xinfer_batch"}, "policy 'xinfer_batch', the plan 'xinfer'"),
    ({"workload": "parcel"}, "workload 'parcel'"),
    ({"rate_table_provenance": "another calibration"}, "rate table 'another calibration'"),
    ({"config": {"slots": [4, 4, 8], "max_batch": 1, "phase_spread": False}},
     "slots 4,4,8, the plan 1,1,2"),
    ({"config": {"slots": [1, 1, 2], "max_batch": 4, "phase_spread": False}}, "max batch 4"),
    ({"config": {"slots": [1, 1, 2], "max_batch": 1, "phase_spread": True}},
     "phase spreading True"),
    ({"simulator": None}, "no simulator run beside the engine"),
    ({"benchmark": "peers"}, "not the JSON of xinfer-bench engine"),
    ({"metrics": {}}, "no attainment"),
])
def test_a_run_of_another_setting_is_refused_naming_the_file_and_field(
        tmp_path: Path, changes: dict[str, object], why: str) -> None:
    good = _run(tmp_path / "good.json", 4, 0.9, 0.9)
    bad = _run(tmp_path / "bad.json", 4, 0.9, 0.9, changes)
    with pytest.raises(EngineBandError, match=r"bad\.json") as info:
        load_band([good, bad], SETTING)
    assert why in str(info.value)


def test_unreadable_and_missing_runs_are_refused(tmp_path: Path) -> None:
    with pytest.raises(EngineBandError, match="no engine run"):
        load_band([], SETTING)
    with pytest.raises(EngineBandError, match="cannot read"):
        load_band([tmp_path / "absent.json"], SETTING)
    (tmp_path / "broken.json").write_text("{")
    with pytest.raises(EngineBandError, match=r"broken\.json: cannot read"):
        load_band([tmp_path / "broken.json"], SETTING)


def _metrics(attainment: float) -> WindowMetrics:
    return WindowMetrics(requests=100, responses=100, errors=0, on_time=int(100 * attainment),
                         attainment=attainment, goodput_rps=1.0, throughput_rps=1.0,
                         latency_p50_ms=10.0, latency_p95_ms=10.0, latency_p99_ms=10.0,
                         latency_mean_ms=10.0, mean_wide_latency_ms=10.0, wide_budget_ms=400.0)


def test_a_raised_target_shrinks_the_erc_and_adds_servers() -> None:
    def evaluate(n: int) -> list[WindowMetrics]:  # one point of attainment per robot
        return [_metrics(1.0 - 0.01 * n)] * 2

    plain = plan_site(20, evaluate, Criterion.ATTAINMENT, lo=1, hi=10)
    banded = plan_site(20, evaluate, Criterion.ATTAINMENT, lo=1, hi=10, target=0.97)
    assert (plain.erc, plain.servers) == (5, 4)
    assert (banded.erc, banded.servers) == (3, 7)


@pytest.mark.timeout(120)
def test_plan_with_an_engine_check_states_the_band_and_its_plan(tmp_path: Path,
                                                                 capsys) -> None:
    from xinfer_ros.cli import bench
    from xinfer_ros.cli.sim import main

    run = tmp_path / "engine.json"
    assert bench.main(["engine", "--backend", "emulated", "--robots", "4", "--duration", "4",
                       "--warmup", "1", "--time-scale", "2", "--compare-sim",
                       "--json", str(run)]) == 0
    report = json.loads(run.read_text())
    gap = report["metrics"]["attainment"] - report["simulator"]["metrics"]["attainment"]
    out = tmp_path / "plan.json"
    main(["plan", "--robots", "10", "--search", "4-5", "--rounds", "1", "--duration", "8",
          "--warmup", "2", "--quiet", "--engine-check", str(run), "--json", str(out)])
    data = json.loads(out.read_text())
    band = data["engine_band"]
    assert band["low_points"] == pytest.approx(100 * gap) == band["high_points"]
    assert band["robots"] == [4] and band["simulated_target"] >= 0.95
    assert "engine minus simulator attainment" in capsys.readouterr().out
    # The same run does not describe another policy's plan: one line, and no plan.
    with pytest.raises(SystemExit, match=r"--engine-check .*engine\.json: the engine ran "
                                         r"policy 'xinfer', the plan 'edf'"):
        main(["plan", "--robots", "10", "--policy", "edf", "--search", "4-5", "--quiet",
              "--engine-check", str(run)])
