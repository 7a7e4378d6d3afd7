"""The fleet runner's report: the JSON file's keys and the printed table (no ROS)."""

from __future__ import annotations

import json

import pytest

from xinfer_ros.cli.fleet import _fleet_send_lag, _print_report
from xinfer_ros.cli.fleet_report import (
    ExecutorFigures,
    FleetReport,
    FleetTotal,
    RobotReport,
    ServerReport,
)
from xinfer_ros.core.metrics import ResponseRecord, summarize
from xinfer_ros.engine.speed_probe import ProbeStats, SpeedSummary

WINDOW = (0.0, 10.0)


def _records(latency_s: float) -> list[ResponseRecord]:
    return [ResponseRecord(0.2 * k, 0.2 * k + latency_s, 0.09 if k % 2 else 0.4)
            for k in range(40)]


def _executor(requests: int, lag_ms: float) -> ExecutorFigures:
    return ExecutorFigures(
        starved_ticks=3, ticks=300, handoff_violations=1, trigger_misses=0,
        request_timeouts=0, requests_sent=requests, chunks_applied=requests, non_ok_chunks=0,
        switch_step_max=0.25, within_step_max=0.01, send_lag_mean_ms=lag_ms,
        send_lag_p95_ms=2 * lag_ms, send_lag_max_ms=3 * lag_ms)


def _report() -> FleetReport:
    robots = {
        "robot_1": RobotReport(summarize(_records(0.05), WINDOW), {"ok": 40}, {"server": 40},
                               _executor(30, 1.0)),
        "robot_2": RobotReport(summarize(_records(0.05), WINDOW), {"ok": 40}, {"server": 40},
                               _executor(10, 5.0)),
        # Its executor never reported.
        "robot_3": RobotReport(summarize(_records(0.2), WINDOW), {"ok": 40}, {}, None),
    }
    every = [r for name in robots for r in _records(0.2 if name == "robot_3" else 0.05)]
    return FleetReport(
        policy="xinfer", backend="emulated", model="pi0-tiny", phase_spread=True,
        workload="phases", budget_scale=1.0, budget_scale_reason="as in the paper",
        duration_s=10.0, server_ready_s=2.0, window_s=WINDOW, robots=robots,
        total=FleetTotal(summarize(every, WINDOW), {"ok": 120}, _fleet_send_lag(robots)),
        failed_nodes=[],
        servers={"server": ServerReport(list(robots), summarize(every, WINDOW))})


def test_the_report_file_keeps_its_keys_and_a_silent_executor_is_null() -> None:
    data = json.loads(json.dumps(_report().to_dict(), default=float))
    assert list(data) == [
        "robots_count", "policy", "backend", "model", "workload", "phase_spread",
        "budget_scale", "budget_scale_reason", "duration_s", "server_ready_s", "window_s",
        "emulated", "robots", "total", "failed_nodes", "servers", "benchmark"]
    assert data["robots_count"] == 3 and data["emulated"] is True
    assert data["window_s"] == [0.0, 10.0]
    one, silent = data["robots"]["robot_1"], data["robots"]["robot_3"]
    assert one["ticks"] == 300 and one["handoff_violations"] == 1  # the executor's count
    assert silent["ticks"] is None and silent["send_lag_mean_ms"] is None
    assert one["requests"] == 40 and one["statuses"] == {"ok": 40}
    # The fleet's send lag weighs each robot's mean by its requests.
    assert data["total"]["send_lag_mean_ms"] == pytest.approx((30 * 1.0 + 10 * 5.0) / 40)
    assert data["total"]["send_lag_max_ms"] == pytest.approx(15.0)
    assert data["servers"]["server"]["robots"] == ["robot_1", "robot_2", "robot_3"]


def test_the_table_leaves_a_silent_executors_cells_blank(capsys) -> None:
    _print_report(_report())
    lines = {line.split()[0]: line for line in capsys.readouterr().out.splitlines() if line}
    # requests, attainment, P50, P99, all P50, all P99, then starved/late/lag/lag95.
    assert lines["robot_1"].split()[7:11] == ["3", "1", "1.00", "2.00"]
    assert lines["robot_3"].split()[7] == "{'ok':"  # no executor figures at all
    assert "send lag behind Eq. 1" in lines["send"] and "mean 2.00" in lines["send"]


def test_an_arm_and_a_probe_are_written_when_the_run_has_them() -> None:
    report = _report()
    report.arm = "shipped"
    report.speed_probe = SpeedSummary(matmul=ProbeStats.of([1.0, 1.2, 1.1]),
                                      python=ProbeStats.of([0.9, 0.9, 1.0]), samples=3)
    data = json.loads(json.dumps(report.to_dict(), default=float))
    assert list(data)[-3:] == ["benchmark", "arm", "speed_probe"]
    assert data["benchmark"] == "fleet" and data["arm"] == "shipped"
    assert data["speed_probe"]["matmul"]["median_ms"] == pytest.approx(1.1)
    assert data["speed_probe"]["samples"] == 3
