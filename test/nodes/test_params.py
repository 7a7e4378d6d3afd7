"""Every node ends with exit status 2 and one line on an invalid parameter."""

from __future__ import annotations

import importlib

import pytest

pytest.importorskip("rclpy")
pytestmark = [pytest.mark.ros, pytest.mark.timeout(60)]

#: (node, parameter assignment, words the one-line error must contain)
CASES = [
    ("rtc_executor", "hold_timeout_s:=1", ["'hold_timeout_s'", "a float (e.g. 1.0, not 1)"]),
    ("rtc_executor", "startup:=zero_pose", ["'startup'", "['silent', 'hold_state']"]),
    ("rtc_executor", "commit_steps:=-1", ["'commit_steps'", "out of range", "[0, 1024]"]),
    ("rtc_executor", "action_dim:=seven", ["'action_dim'", "an integer"]),
    ("rtc_executor", "min_budget_ms:=50000.0", ["'min_budget_ms'", "exceeds"]),
    ("robot_sim", "camera_rate_hz:=0.0", ["'camera_rate_hz'", "out of range"]),
    ("robot_sim", "workload:=chaos", ["'workload'", "one of"]),
    ("robot_sim", "budget_scale:=2", ["'budget_scale'", "a float"]),
    ("inference_server", "model:=no-such-model", ["'model'", "no model preset",
                                                   "available"]),
    ("inference_server", "policy:=lifo", ["'policy'", "one of"]),
    ("inference_server", "max_budget_ms:=100", ["'max_budget_ms'", "a float"]),
    ("inference_server", "image_transports:=[raw,theora]", ["'image_transports'",
                                                             "raw or compressed"]),
    ("inference_server", "robots:=[]", ["'robots'"]),
    ("inference_server", "robots:=[r1,r1]", ["'robots'", "repeat"]),
    ("fleet_manager", "robots:=[1r]", ["'robots'", "'1r'", "namespace"]),
    ("inference_server", "server_name:=gpu-0", ["'server_name'", "a letter, then letters"]),
    ("recorder", "storage:=rosbag1", ["'storage'", "one of"]),
    ("recorder", "bag_version:=7", ["'bag_version'", "out of range", "[8, 9]"]),
]


@pytest.mark.parametrize(("node", "assignment", "words"), CASES,
                         ids=[f"{n}-{a.split(':=')[0]}" for n, a, _ in CASES])
def test_invalid_parameter_exits_2_with_one_line(node: str, assignment: str, words: list[str],
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    main = importlib.import_module(f"xinfer_ros.nodes.{node}").main
    extra = {"inference_server": ["-p", "backend:=emulated"],
             "recorder": ["-p", "output:=/nonexistent/bag"]}.get(node, [])
    status = main([node, "--ros-args", "-p", assignment, *extra])
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2
    assert len(err) == 1 and err[0].startswith("error: "), err
    for word in words:
        assert word in err[0], err[0]


def test_nodes_keep_discovery_on_loopback_unless_chosen(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    from xinfer_ros.nodes.runtime import keep_discovery_local

    monkeypatch.delenv("ROS_AUTOMATIC_DISCOVERY_RANGE")
    keep_discovery_local()
    assert os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] == "LOCALHOST"
    monkeypatch.setenv("ROS_AUTOMATIC_DISCOVERY_RANGE", "SUBNET")
    keep_discovery_local()
    assert os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] == "SUBNET"
