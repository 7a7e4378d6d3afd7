"""The engine benchmark runs end to end with the emulated backend."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from xinfer_ros.cli import bench, bench_engine


def test_bench_engine_emulated_json(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    rc = bench.main(["engine", "--backend", "emulated", "--robots", "4", "--duration", "4",
                     "--warmup", "1", "--time-scale", "2", "--no-speed-probe",
                     "--json", str(out)])
    assert rc == 0
    report = json.loads(out.read_text())
    assert report["emulated"] is True and "EMULATED" in report["notice"]
    m = report["metrics"]
    assert m["requests"] > 10 and m["errors"] == 0
    assert 0.0 <= m["attainment"] <= 1.0
    for key in ("vit", "prefill", "action", "output", "queue", "lane"):
        assert key in report["stage_ms"]
    assert report["prediction"]["samples"] > 0
    # The file's schema, in its order (tools and docs/BENCHMARKS.md read these keys).
    assert list(report) == [
        "benchmark", "emulated", "notice", "backend", "engine", "config", "policy",
        "workload", "robots", "duration_s", "window_s", "rate_table", "rate_table_provenance",
        "time_scale", "phase_spread", "held", "host", "load_average", "metrics", "stage_ms",
        "prediction", "rate_correction", "statuses", "dispatcher", "batches", "lateness"]
    # Every budget class the run sent, each with its late and on-time parts.
    lateness = report["lateness"]
    assert set(lateness) == set(m["per_budget"])
    assert sum(row["requests"] for row in lateness.values()) == m["requests"]
    for row in lateness.values():
        assert set(row["on_time_ms"]) == set(row["late_ms"]) == {
            "queue", "lane", "prepare", "vit", "prefill", "action", "output"}


def test_bench_engine_serial_is_slower_than_async() -> None:
    parser = argparse.ArgumentParser()
    bench_engine.add_arguments(parser)
    reports = {}
    for mode in ("async", "serial"):
        args = parser.parse_args(["--robots", "12", "--duration", "3", "--warmup", "1",
                                  "--engine", mode])
        reports[mode] = bench_engine.run_benchmark(args)
    a, s = reports["async"].metrics, reports["serial"].metrics
    # Serial saturates near 1 / (sum of isolated unit times) ~ 33 req/s; 12 robots offer
    # up to 12 / 0.18 s = 67 req/s, which async serves.
    assert a.throughput_rps > s.throughput_rps, (a, s)
    assert a.latency_p50_ms < s.latency_p50_ms


def test_gpu_bench_script_parses() -> None:
    import shutil
    import subprocess

    script = Path(__file__).resolve().parents[2] / "scripts" / "gpu_bench.sh"
    bash = shutil.which("bash")
    assert bash is not None
    subprocess.run([bash, "-n", str(script)], check=True)
    text = script.read_text()
    assert "--dry-run" in text and 'MODEL="${MODEL:-pi0}"' in text and "pip install" in text
    assert "torch==" not in text  # never installs a (CUDA) torch


@pytest.mark.slow
@pytest.mark.extended
@pytest.mark.timeout(600)
def test_gpu_bench_dry_run_runs_the_torch_path(tmp_path: Path) -> None:
    # What a lent GPU will run, on the CPU: pi0-tiny in bfloat16 through the torch
    # backend for the check, the calibration and every benchmark run.
    import os
    import subprocess

    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run(["bash", str(root / "scripts" / "gpu_bench.sh"), "--dry-run"],
                          cwd=root, env={**os.environ, "OUT": str(tmp_path)},
                          capture_output=True, text=True, timeout=580, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "[check] pi0-tiny request ok on cpu in bfloat16" in proc.stdout
    report = json.loads((tmp_path / "engine_bench.json").read_text())
    assert report["dry_run"] and report["backend"]["dtype"] == "torch.bfloat16"
    runs = report["runs"]
    # Compiled on one Action lane first (torch.compile standing in for CUDA graphs),
    # async on each slot layout and serial once a count, then batched; each group on a
    # table calibrated the way it serves (no eager group unless asked for).
    compiled = [f"async+compile-on@{v}" for v in ("4,4,1", "2,2,1", "1,1,1")]
    compiled.append("async+compile-on@4,4,1+shed-doomed")
    assert [(r["robots"], r["arm"]) for r in runs] == [
        *((2, arm) for arm in compiled), (2, "serial+compile-on"),
        *((4, arm) for arm in compiled), (4, "serial+compile-on"),
        (4, "async+batch4-interleaved")]
    for run in runs:
        assert run["backend"]["backend"] == "torch" and not run["emulated"]
        assert run["metrics"]["responses"] > 0 and run["statuses"].get("ERROR", 0) == 0
    assert [r["config"]["max_batch"] for r in runs] == [1] * 10 + [4]
    assert [r["backend"]["compile"] for r in runs] == ["on"] * 10 + ["off"]
    assert [r["config"]["slots"] for r in runs[:5]] == [[4, 4, 1], [2, 2, 1], [1, 1, 1],
                                                        [4, 4, 1], [4, 4, 1]]
    assert [r["config"]["shed_doomed"] for r in runs[:5]] == [False] * 3 + [True, False]
    # The batched group: the saturation switch, its three arms interleaved in one run.
    assert runs[-1]["policy"] == "xinfer_batch_switch"
    assert [a["arm"] for a in runs[-1]["interleave"]["arms"]] == ["off", "on", "auto"]
    assert "compile_error" not in report and report["steps"]["compile_s"] > 0
    assert [(c["max_batch"], c["compile"], c["table"]) for c in report["calibration"]] == [
        (1, "on", "rate_table_pi0-tiny_cpu_on.json"),
        (4, "off", "rate_table_pi0-tiny_cpu_batch4.json")]
    for calib in report["calibration"]:
        assert (tmp_path / calib["table"]).is_file()


def test_bench_engine_phase_spread_holds_late_responses(tmp_path: Path) -> None:
    # Parcel at 16 robots: xinfer defers wide work past T_E while tight robots keep
    # their phases, the case phase spreading acts on (about 110 holds in 8 s). Time runs
    # at 1x: compressed, a co-tenant's burst on a 2-core machine made the emulated device
    # fall behind and shed requests. Even at 1x a burst sheds a few now and then (10 of
    # 512 once in CI), so shedding is bounded rather than zero; nothing may fail.
    out = tmp_path / "r.json"
    rc = bench.main(["engine", "--backend", "emulated", "--robots", "16", "--workload",
                     "parcel", "--duration", "8", "--warmup", "1", "--time-scale", "1",
                     "--phase-spread", "--compare-sim", "--json", str(out)])
    assert rc == 0
    report = json.loads(out.read_text())
    assert report["phase_spread"] is True and report["held"] > 0
    statuses = report["statuses"]
    assert statuses.get("ERROR", 0) == 0 and statuses.get("REJECTED", 0) == 0, statuses
    assert report["metrics"]["errors"] <= 0.05 * report["metrics"]["requests"], statuses
    assert "simulator" in report


def test_the_report_describes_the_backend_as_it_ran_not_as_closed(monkeypatch) -> None:
    # A torch backend with Action worker processes reports 0 of them once closed; the
    # report must say what served the run.
    from xinfer_ros.engine.backends import EmulatedBackend

    class Closing(EmulatedBackend):
        closed = False

        def close(self) -> None:
            self.closed = True

        def describe(self) -> dict:
            return {**super().describe(), "workers": 0 if self.closed else 2}

    real = bench_engine.make_backend
    monkeypatch.setattr(bench_engine, "make_backend",
                        lambda name, **kw: Closing(kw["table"], kw["clock"]) if name == "emulated"
                        else real(name, **kw))
    parser = argparse.ArgumentParser()
    bench_engine.add_arguments(parser)
    args = parser.parse_args(["--robots", "2", "--duration", "1", "--warmup", "0.2"])
    report = bench_engine.run_benchmark(args)
    assert report.backend["workers"] == 2


def test_compare_sim_also_runs_the_table_with_the_engines_learned_slowdown() -> None:
    # The simulator on the table the engine ended up predicting with (W_s -> k_s W_s):
    # a device twice as slow as its table keeps fewer requests in budget there.
    from xinfer_ros.cli.bench import build_parser
    from xinfer_ros.cli.bench_engine import simulate_same
    from xinfer_ros.engine.types import EngineConfig

    argv = ["engine", "--backend", "emulated", "--robots", "16", "--workload", "phases",
            "--duration", "20", "--warmup", "5"]
    args = build_parser(argv).parse_args(argv)
    config = EngineConfig()
    same = simulate_same(args, config, (5.0, 20.0), (1.0, 1.0, 1.0))
    assert same.corrected is None and "corrected" not in same.to_dict()
    slower = simulate_same(args, config, (5.0, 20.0), (2.0, 2.0, 2.0))
    assert slower.metrics == same.metrics
    assert slower.corrected is not None and slower.corrected.factors == (2.0, 2.0, 2.0)
    assert slower.corrected.metrics.attainment < same.metrics.attainment - 0.2
    assert slower.to_dict()["corrected"]["factors"] == [2.0, 2.0, 2.0]


def test_save_table_writes_the_table_with_the_slowdown_the_run_learned(tmp_path: Path) -> None:
    # The saved table is the run's table as the predictor ended up using it: each
    # stage's work scaled by the factor the online correction learned (W_s -> k_s W_s).
    from xinfer_ros.core.rate_table import default_rate_table, load_rate_table

    out, saved = tmp_path / "r.json", tmp_path / "serving.json"
    rc = bench.main(["engine", "--backend", "emulated", "--robots", "4", "--duration", "6",
                     "--warmup", "1", "--time-scale", "2", "--noise", "0.2",
                     "--json", str(out), "--save-table", str(saved)])
    assert rc == 0
    k = json.loads(out.read_text())["rate_correction"]["factors"]
    table, base = load_rate_table(saved), default_rate_table()
    assert table.work == pytest.approx(tuple(w * f for w, f in zip(base.work, k, strict=True)))
    assert table.rates == base.rates and table.overhead == base.overhead
    assert "learned online by xinfer-bench engine (xinfer, phases, 4 robots" in table.provenance
    assert bench.main(["engine", "--backend", "emulated", "--no-rate-correction",
                       "--save-table", str(saved)]) == 2


def test_an_unreadable_rate_table_stops_the_benchmark_in_one_line(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match=r"^error: rate table .*absent\.json does not exist$"):
        bench.main(["engine", "--backend", "emulated", "--duration", "2",
                    "--rate-table", str(tmp_path / "absent.json")])


def test_the_report_names_its_arm_and_the_hosts_speed_unless_told_not_to(
        tmp_path: Path) -> None:
    common = ["engine", "--backend", "emulated", "--robots", "2", "--duration", "3",
              "--warmup", "1"]
    out = tmp_path / "r.json"
    assert bench.main([*common, "--arm", "unb", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["arm"] == "unb"
    probe = report["speed_probe"]
    # Two seconds of window at one sample per 0.25 s, less the child's start-up.
    assert 2 <= probe["samples"] <= 9
    assert probe["matmul"]["median_ms"] > 0 and probe["python"]["median_ms"] > 0
    # Unbatched (max_batch 1): every unit ran as a batch of one, counted in the window.
    batches = report["batches"]
    assert set(batches) == {"vit", "prefill", "action"}
    assert all(set(counts) == {"1"} and counts["1"] > 0 for counts in batches.values())
    # Counted by start time in the window, requests by send time: a robot's units can
    # straddle either edge, at most one request per robot at each.
    assert batches["action"]["1"] <= report["metrics"]["requests"] + 2 * report["robots"]
    assert bench.main([*common, "--no-speed-probe", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert "speed_probe" not in report and "arm" not in report


def test_gpu_suite_records_a_failed_group_and_goes_on(tmp_path: Path) -> None:
    # One device lease runs every group: a group that raises (e.g. CUDA graphs that
    # fail on their first lane) is written to the report, and the next group runs.
    import argparse

    from xinfer_ros.cli.gpu_suite import _Suite

    report: dict[str, object] = {"steps": {}, "calibration": []}
    suite = _Suite(argparse.Namespace(out=tmp_path), backend=None,  # type: ignore[arg-type]
                   report=report)

    def broken() -> None:
        raise RuntimeError("graph replay failed")

    ran: list[str] = []
    assert not suite.group("compiled", broken)
    assert suite.group("eager", lambda: ran.append("eager"))
    assert ran == ["eager"]
    written = json.loads((tmp_path / "engine_bench.json").read_text())
    assert written["errors"] == {"compiled": "RuntimeError: graph replay failed"}
    # Where it was raised, for an error whose message alone names nothing.
    assert "in broken" in written["tracebacks"]["compiled"]


def _on_a_switch(*, robots: int, duration: float) -> list[str]:
    """``xinfer-bench engine`` arguments: the saturation switch serving the tiny π0 (the
    emulated backend runs units one at a time), measured from 1 s, without the probe."""
    from xinfer_ros.config_paths import config_dir

    table = config_dir() / "rate_table_cpu_pi0_tiny_batch4.json"
    return ["engine", "--backend", "torch", "--model", "pi0-tiny", "--robots", str(robots),
            "--duration", str(duration), "--warmup", "1", "--no-speed-probe",
            "--policy", "xinfer_batch_switch", "--slots", "4,4,8", "--max-batch", "4",
            "--rate-table", str(table)]


def test_the_report_says_what_the_saturation_switch_read(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "r.json"
    rc = bench.main([*_on_a_switch(robots=2, duration=3), "--json", str(out)])
    assert rc == 0
    report = json.loads(out.read_text())
    assert list(report)[-1] == "saturation"
    sat = report["saturation"]
    assert sat["arrival_rate"] > 0 and len(sat["utilisation"]) == len(sat["unit_s"]) == 3
    assert 0.0 <= sat["saturated_share"] <= 1.0
    assert "saturation switch: saturated" in capsys.readouterr().out


def test_an_interleaved_run_reports_each_arm_and_their_differences(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "r.json"
    rc = bench.main([*_on_a_switch(robots=3, duration=7), "--interleave", "1.5",
                     "--interleave-arms", "off,on", "--interleave-settle", "0.5",
                     "--json", str(out)])
    assert rc == 0
    report = json.loads(out.read_text())
    il = report["interleave"]
    assert (il["cycles"], il["segment_s"], il["settle_s"], il["tolerance"]) == (2, 1.5, 0.5, 2.0)
    assert [a["arm"] for a in il["arms"]] == ["off", "on"]
    assert all(a["requests"] > 0 and len(a["per_cycle"]) == 2 for a in il["arms"])
    assert [(d["arm"], d["other"]) for d in il["differences"]] == [("on", "off")]
    # Every request counted is one the window measured, after its segment settled.
    assert sum(a["requests"] for a in il["arms"]) <= report["metrics"]["requests"]
    assert "interleaved: 2 cycles of 2 x 1.5 s" in capsys.readouterr().out


@pytest.mark.parametrize(("extra", "message"), [
    (["--interleave", "5"], "whole cycles"),
    (["--interleave", "2", "--interleave-arms", "off,sometimes"], "unknown interleaved arm"),
    (["--interleave", "2", "--interleave-settle", "2"], "--interleave-settle"),
    (["--interleave", "2", "--pairs", "2"], "not with --pairs"),
    (["--interleave", "2", "--compare-sim"], "not with --pairs or --compare-sim"),
    (["--interleave", "2", "--policy", "xinfer"], "has none (use xinfer_batch_switch)"),
])
def test_an_interleaved_run_that_cannot_be_planned_stops_in_one_line(
        extra: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    rc = bench.main(["engine", "--backend", "emulated", "--duration", "13", "--warmup", "1",
                     "--no-speed-probe", "--time-scale", "20", "--policy", "fifo", *extra])
    assert rc == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err
