"""xinfer-sim CLI: run / erc / compare / project write tables, JSON and plots."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from xinfer_ros.cli.sim import main, parse_counts

SHORT = ["--duration", "25", "--warmup", "5", "--quiet", "--workers", "1"]


def test_parse_counts() -> None:
    assert parse_counts("8-12:2,15") == [8, 10, 12, 15]
    assert parse_counts("3") == [3]


def test_run_writes_json_with_metric_names(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run.json"
    assert main(["run", "--policy", "edf", "--robots", "4", "--rounds", "2", *SHORT,
                 "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert len(data["rounds"]) == 2 and data["passes"] == [True, True]
    metrics = data["rounds"][0]["metrics"]
    for key in ("attainment", "goodput_rps", "throughput_rps", "latency_p50_ms",
                "latency_p95_ms", "latency_p99_ms", "mean_wide_latency_ms", "per_budget"):
        assert key in metrics
    assert "att%" in capsys.readouterr().out


def test_run_custom_budgets_and_csv(tmp_path: Path) -> None:
    csv = tmp_path / "b.csv"
    csv.write_text("90\n90\n250\n")
    assert main(["run", "--policy", "fifo", "--robots", "2", "--rounds", "1",
                 "--workload", "custom", "--budget-csv", str(csv), *SHORT]) == 0
    assert main(["run", "--policy", "fifo", "--robots", "2", "--rounds", "1",
                 "--workload", "custom", "--budgets", "100,300", "--phase-length", "5",
                 *SHORT]) == 0


def test_erc_uniform_uses_latency_criterion(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "erc.json"
    assert main(["erc", "--policy", "fifo", "--workload", "uniform", "--robots", "1-2",
                 "--rounds", "1", *SHORT, "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["criterion"] == "latency" and data["erc"] == 2
    assert "ERC = 2" in capsys.readouterr().out


def test_compare_bursty_writes_plots_and_project_from_json(tmp_path: Path) -> None:
    args = ["compare", "--policy", "fifo,edf", "--workload", "bursty", "--robots", "2,3",
            "--rounds", "1", "--duration", "70", "--warmup", "50", "--quiet",
            "--workers", "1", "--out", str(tmp_path)]
    assert main(args) == 0
    data = json.loads((tmp_path / "compare.json").read_text())
    assert set(data["erc"]) == {"fifo", "edf"}
    assert set(data["timeline"]) == {"fifo", "edf"}
    # The second burst group (120 s) is past the 70 s run: only 60-70 s is measured.
    burst = data["burst_attainment"]["edf"]["2"]
    assert len(burst["rounds"]) == 1 and 0.0 <= burst["mean"] <= 1.0
    assert (tmp_path / "bursty_sweep.png").stat().st_size > 0
    assert (tmp_path / "bursty_timeline.png").stat().st_size > 0
    proj = tmp_path / "proj"
    assert main(["project", "--from-json", str(tmp_path / "compare.json"), "--quiet",
                 "--out", str(proj)]) == 0
    assert (proj / "projection.png").stat().st_size > 0
    assert "curves" in json.loads((proj / "project.json").read_text())


def test_tune_selects_a_candidate_and_writes_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "tune.json"
    assert main(["tune", "--policy", "edf", "--slots", "1,2,1", "--rounds", "1",
                 "--duration", "15", "--warmup", "5", "--quiet", "--workers", "1",
                 "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert len(data["candidates"]) == 2 and data["points"] == [["phases", 15]]
    assert data["selected"]["params"]["limits"] in ([1, 1, 1], [1, 2, 1])
    printed = capsys.readouterr().out
    assert "selected: limits=" in printed and "<-" in printed


def test_tune_on_one_workload_uses_its_own_seeds(tmp_path: Path) -> None:
    out = tmp_path / "tune.json"
    assert main(["tune", "--policy", "slack_gate", "--slots", "2,4,6", "--thresholds", "20",
                 "--workload", "parcel", "--robots", "6", "--rounds", "2",
                 "--duration", "15", "--warmup", "5", "--quiet", "--workers", "1",
                 "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["points"] == [["parcel", 6]] and data["seeds"] == [7000, 7001]
    assert len(data["candidates"]) == 2
    assert data["selected"]["params"]["threshold"] == 0.02
    with pytest.raises(SystemExit, match="custom"):
        main(["tune", "--workload", "custom", "--quiet"])


@pytest.mark.parametrize(("argv", "message"), [
    (["tune", "--robots", "12"], "give --workload"),
    (["tune", "--workload", "parcel", "--robots", "0"], "at least one robot"),
    (["compare", "--tune-robots", "12"], "need --tune-baselines"),
    (["compare", "--tune-seed", "3"], "need --tune-baselines"),
    (["compare", "--tune-baselines", "--tune-robots", "0"], "at least one robot"),
    (["compare", "--tune-baselines", "--seed", "7"], "comparison's own seeds"),
])
def test_tuning_flags_that_would_be_ignored_or_overlap_are_refused_before_any_run(
        argv: list[str], message: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from xinfer_ros.sim import prediction_error, runner

    def never(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a run started")

    monkeypatch.setattr(runner, "run_many", never)
    monkeypatch.setattr(prediction_error, "calibrate", never)
    with pytest.raises(SystemExit, match=message):
        main([*argv, "--predictor-error-ms", "2", "--quiet"])


def test_compare_tunes_the_baselines_on_its_workload_first(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    from xinfer_ros.sim import runner

    seen: list[Any] = []

    def recording(configs: Any, *args: Any, **kwargs: Any) -> Any:
        seen.append(list(configs))
        return real(configs, *args, **kwargs)

    real = runner.run_many
    monkeypatch.setattr(runner, "run_many", recording)
    out = tmp_path / "compare.json"
    assert main(["compare", "--policy", "fifo,edf", "--robots", "3", "--rounds", "1",
                 "--workload", "parcel", "--tune-baselines", "--tune-robots", "3", *SHORT,
                 "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert list(data["tuned"]) == ["edf"]  # FIFO has nothing to tune
    tuned = data["tuned"]["edf"]
    assert tuned["points"] == [["parcel", 3]] and tuned["seeds"] == [7000]
    # At 3 robots no limit binds: every vector ties and the smallest is kept.
    assert tuned["selected"]["params"]["limits"] == [1, 1, 1]
    tuning_runs, comparison = seen
    assert {c.seed for c in tuning_runs} == {7000} and {c.seed for c in comparison} == {0}
    # The comparison runs EDF as tuned, not with the shipped default (3, 1, 2).
    assert [c.policy_kwargs for c in comparison if c.policy == "edf"] == [
        {"limits": [1, 1, 1]}]
    assert "edf tuned on parcel/3" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="comparison's own seeds"):
        main(["compare", "--policy", "edf", "--robots", "3", "--rounds", "1",
              "--tune-baselines", "--tune-seed", "0", *SHORT])


def test_tune_rejects_bad_slots() -> None:
    with pytest.raises(SystemExit):
        main(["tune", "--slots", "4,0,6"])


def test_phase_spread_flag_reaches_the_config(tmp_path: Path) -> None:
    out = tmp_path / "run.json"
    assert main(["run", "--policy", "xinfer", "--robots", "3", "--rounds", "1",
                 "--phase-spread", *SHORT, "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["rounds"][0]["config"]["phase_spread"] is True


def test_predictor_error_is_calibrated_reported_and_refused_below_its_floor(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run.json"
    assert main(["run", "--robots", "10", "--rounds", "2", *SHORT,
                 "--predictor-error-ms", "2.0", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "prediction error: running-stage MAE" in text and "MAE:" in text
    data = json.loads(out.read_text())
    calibration = data["prediction_error"]
    assert calibration["target_ms"] == 2.0 and calibration["robots"] == 10
    assert abs(calibration["mae_ms"] - 2.0) < 0.3 and calibration["rate_error"] > 0
    maes = [r["prediction"]["mae_ms"] for r in data["rounds"]]
    assert all(1.4 < m < 2.6 for m in maes), maes  # each round measures its own
    with pytest.raises(SystemExit, match="below what the predictor errs"):
        main(["run", "--robots", "10", "--rounds", "1", *SHORT, "--predictor-error-ms", "0.1"])


@pytest.mark.parametrize("command", [["run", "--robots", "4"], ["plan", "--robots", "20"],
                                     ["erc"]])
def test_a_missing_or_malformed_rate_table_stops_in_one_line_before_any_run(
        command: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from xinfer_ros.sim import runner

    def never(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a run started")

    monkeypatch.setattr(runner, "run_many", never)
    with pytest.raises(SystemExit, match=r"^error: --rate-table: rate table .*absent\.json "
                                         r"does not exist$"):
        main([*command, "--rate-table", str(tmp_path / "absent.json"), "--quiet"])
    (tmp_path / "bad.json").write_text('{"schema": "nothing we know"}')
    with pytest.raises(SystemExit, match=r"^error: --rate-table: .*bad\.json"):
        main([*command, "--rate-table", str(tmp_path / "bad.json"), "--quiet"])
