"""xinfer-fleet end to end: server, executors and simulated robots as processes."""

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("rclpy")
pytestmark = [pytest.mark.ros, pytest.mark.slow]


@pytest.mark.timeout(120)
def test_fleet_runner_reports_on_an_emulated_fleet(tmp_path) -> None:
    report_path = tmp_path / "report.json"
    proc = subprocess.run(
        [sys.executable, "-m", "xinfer_ros.cli.fleet", "--backend", "emulated", "--robots", "2",
         "--duration", "12", "--warmup", "4", "--no-progress", "--out", str(tmp_path),
         "--json", str(report_path), "--compare-sim"],
        check=False, capture_output=True, text=True, timeout=110, env=dict(os.environ))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(report_path.read_text())
    assert report["emulated"] is True and report["robots_count"] == 2
    assert set(report["robots"]) == {"robot_1", "robot_2"}
    for robot in report["robots"].values():
        # 8 measured seconds at one request per 180 ms: about 44 requests each.
        assert 25 <= robot["requests"] <= 50
        assert robot["statuses"].get("ok", 0) >= 25
        assert robot["ticks"] > 200  # the executor ran its 30 ms control loop
        assert 20.0 < robot["latency_p50_ms"] < 180.0
    assert "robot_1" in proc.stdout and "ALL" in proc.stdout
    # config/fleet.yaml turns phase spreading on; the simulator ran with the same setting.
    assert report["phase_spread"] is True and "phase_spread on" in proc.stdout
    sim = report["simulator"]
    assert sim["phase_spread"] is True and sim["config"]["robots"] == 2
    assert sim["config"]["window"] == report["window_s"]
    assert 0.0 <= sim["metrics"]["attainment"] <= 1.0 and sim["metrics"]["requests"] > 50
    assert "simulator (" in proc.stdout
    assert (tmp_path / "fleet_latency.png").stat().st_size > 10_000


@pytest.mark.timeout(240)
def test_fleet_serves_pi0_tiny_chunks_end_to_end(tmp_path) -> None:
    # transformers' π0 (pi0-tiny, random weights) on the torch backend, as make demo runs it.
    report_path = tmp_path / "report.json"
    proc = subprocess.run(
        [sys.executable, "-m", "xinfer_ros.cli.fleet", "--model", "pi0-tiny", "--robots", "2",
         "--duration", "20", "--warmup", "4", "--no-progress", "--out", str(tmp_path),
         "--json", str(report_path)],
        check=False, capture_output=True, text=True, timeout=230, env=dict(os.environ))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(report_path.read_text())
    assert report["emulated"] is False and report["model"] == "pi0-tiny"
    # Timed from the server's first answer: model loading is not in the window.
    assert report["server_ready_s"] > 0 and report["window_s"][0] > report["server_ready_s"]
    # Budgets fitted to this machine's calibrated pi0-tiny table, and said so.
    assert report["budget_scale"] > 1 and "rate_table_cpu_pi0_tiny.json" in proc.stdout
    assert set(report["total"]["per_budget"]) == {f"{90 * report['budget_scale']:g}",
                                                  f"{400 * report['budget_scale']:g}"}
    for robot in report["robots"].values():
        assert robot["statuses"].get("ok", 0) >= 15, robot["statuses"]
        # Each H = 50 chunk reached the executor and was spliced, none refused.
        assert robot["chunks_applied"] >= 15 and robot["non_ok_chunks"] <= 2
        assert robot["starved_ticks"] == 0 or robot["starved_ticks"] < robot["ticks"] / 10
        assert robot["requests_sent"] >= robot["chunks_applied"]


@pytest.mark.timeout(60)
def test_simulator_comparison_follows_the_servers_phase_spread() -> None:
    from xinfer_ros.cli.fleet import simulate_fleet
    from xinfer_ros.fleet.plan import build_fleet_plan

    server = build_fleet_plan(4, backend="emulated")[0].parameters
    assert server["phase_spread"] is True  # config/fleet.yaml
    for setting in (True, False):
        out = simulate_fleet({**server, "phase_spread": setting}, 4, workload="phases",
                             seed=0, duration=20.0, window=(5.0, 19.0))
        assert out["phase_spread"] is setting and out["config"]["phase_spread"] is setting
        assert out["config"]["rate_table"] is None  # emulated: the shipped default table
        assert out["metrics"]["requests"] > 100


@pytest.mark.timeout(150)
def test_two_servers_serve_their_share_of_the_fleet(tmp_path) -> None:
    report_path = tmp_path / "report.json"
    proc = subprocess.run(
        [sys.executable, "-m", "xinfer_ros.cli.fleet", "--backend", "emulated", "--robots", "2",
         "--servers", "2", "--duration", "10", "--warmup", "3", "--no-progress",
         "--out", str(tmp_path), "--json", str(report_path)],
        check=False, capture_output=True, text=True, timeout=140, env=dict(os.environ))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(report_path.read_text())
    servers = report["servers"]
    assert {n: s["robots"] for n, s in servers.items()} == {"server_0": ["robot_1"],
                                                            "server_1": ["robot_2"]}
    for server in servers.values():
        assert server["requests"] >= 20 and server["attainment"] > 0.9, server
    assert "on 2 server(s)" in proc.stdout and "server_1" in proc.stdout
    logs = {p.name for p in tmp_path.glob("run_*/*.log")}
    assert {"server_server_0.log", "server_server_1.log"} <= logs
