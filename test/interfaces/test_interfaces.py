"""ROS interfaces: generation, serialization round trips, cross-process exchange, loopback."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

rclpy = pytest.importorskip("rclpy", reason="rclpy is not installed (run make build)")
pytestmark = pytest.mark.ros

from rclpy.serialization import deserialize_message, serialize_message  # noqa: E402
from xinfer_ros.msg import (  # noqa: E402
    ActionChunk,
    FleetStats,
    PolicyRequest,
    ResponseBudget,
    RobotStats,
    StageTiming,
)
from xinfer_ros.srv import GetFleetStats, SetPolicy  # noqa: E402

from ..service_calls import ask  # noqa: E402

PEER = Path(__file__).with_name("_peer.py")
H, D = 16, 14


def roundtrip(msg):
    return deserialize_message(serialize_message(msg), type(msg))


def test_policy_request_roundtrip_keeps_rtc_payload() -> None:
    prev = np.random.default_rng(0).standard_normal((H, D)).astype(np.float32)
    msg = PolicyRequest(robot_id="robot_3", seq=2**40, budget_ms=90.0, commit_steps=8)
    msg.header.stamp.sec, msg.header.stamp.nanosec = 12, 345
    msg.keyframe_spacing_s = 0.03
    msg.prev_chunk = prev.ravel().tolist()
    msg.prev_horizon, msg.prev_action_dim = H, D
    msg.instruction = "stack the red block on the blue one"
    out = roundtrip(msg)
    assert out.robot_id == "robot_3" and out.seq == 2**40
    assert out.budget_ms == 90.0 and out.commit_steps == 8
    assert out.header.stamp.nanosec == 345
    np.testing.assert_array_equal(np.asarray(out.prev_chunk).reshape(H, D), prev)
    assert out.instruction == msg.instruction


def test_action_chunk_roundtrip_with_status_and_timing() -> None:
    actions = np.linspace(-1, 1, H * D, dtype=np.float32)
    msg = ActionChunk(robot_id="r", seq=7, status=ActionChunk.STATUS_SHED, reason="late")
    msg.horizon, msg.action_dim, msg.commit_steps = H, D, 8
    msg.actions = actions.tolist()
    msg.image_stamps = [msg.header.stamp] * 3
    msg.timing = StageTiming(vit_ms=4.3, prefill_ms=8.9, action_ms=12.1, budget_ms=90.0)
    msg.timing.budget_met = True
    out = roundtrip(msg)
    assert out.status == ActionChunk.STATUS_SHED and out.reason == "late"
    np.testing.assert_array_equal(np.asarray(out.actions), actions)
    assert len(out.image_stamps) == 3
    assert out.timing.prefill_ms == pytest.approx(8.9) and out.timing.budget_met
    assert len({ActionChunk.STATUS_OK, ActionChunk.STATUS_REJECTED,
                ActionChunk.STATUS_SHED, ActionChunk.STATUS_ERROR}) == 4


def test_camera_images_roundtrip() -> None:
    from sensor_msgs.msg import Image

    rng = np.random.default_rng(1)
    for width in (352, 320, 320):
        pixels = rng.integers(0, 256, size=(224, width, 3), dtype=np.uint8)
        img = Image(height=224, width=width, encoding="rgb8", step=width * 3)
        img.data = pixels.tobytes()
        out = roundtrip(img)
        got = np.frombuffer(bytes(out.data), dtype=np.uint8).reshape(224, width, 3)
        np.testing.assert_array_equal(got, pixels)


def test_budget_and_stats_roundtrip() -> None:
    budget = roundtrip(ResponseBudget(budget_ms=400.0, phase="transport", source="controller"))
    assert (budget.budget_ms, budget.phase) == (400.0, "transport")
    robots = [RobotStats(robot_id=f"robot_{i}", requests=100, on_time=96 + i % 3,
                         attainment=0.96, latency_p99_ms=140.0) for i in range(20)]
    stats = roundtrip(FleetStats(policy="xinfer", window_s=10.0, robots=robots,
                                 total=RobotStats(robot_id="*", requests=2000)))
    assert stats.policy == "xinfer" and len(stats.robots) == 20
    assert stats.robots[19].on_time == 97 and stats.total.requests == 2000


def test_services_roundtrip() -> None:
    req = roundtrip(SetPolicy.Request(policy="edf", parameter_names=["limit_vit"],
                                      parameter_values=["2"]))
    assert req.parameter_names == ["limit_vit"] and req.parameter_values == ["2"]
    resp = roundtrip(GetFleetStats.Response(stats=FleetStats(policy="fifo")))
    assert resp.stats.policy == "fifo"
    assert roundtrip(GetFleetStats.Request(window_s=5.0)).window_s == 5.0


@pytest.fixture
def ros_node():
    rclpy.init()
    node = rclpy.create_node(f"test_{os.getpid()}")
    yield node
    node.destroy_node()
    rclpy.shutdown()


def _spawn(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(PEER), *args], env=dict(os.environ))


@pytest.mark.timeout(60)
def test_action_chunk_crosses_processes(ros_node) -> None:
    node = ros_node
    received: list[ActionChunk] = []
    topic = f"chunk_{os.getpid()}"
    node.create_subscription(ActionChunk, topic, received.append, 10)
    peer = _spawn("publish", topic, "5")
    try:
        deadline = time.monotonic() + 30.0
        while len(received) < 5 and time.monotonic() < deadline:
            rclpy.spin_once(node, timeout_sec=0.1)
        assert peer.wait(timeout=30) == 0
    finally:
        peer.kill()
    assert len(received) >= 5
    chunk = received[0]
    assert (chunk.horizon, chunk.action_dim, len(chunk.actions)) == (H, D, H * D)
    assert chunk.actions[223] == pytest.approx(223 / 224)
    assert [m.seq for m in received[:5]] == [0, 1, 2, 3, 4]


@pytest.mark.timeout(90)
def test_service_call_crosses_processes(ros_node) -> None:
    node = ros_node
    peer = _spawn("serve", "60")  # outlives every try ask makes
    try:
        client = node.create_client(SetPolicy, "/peer/set_policy")
        for policy, ok in (("xinfer", True), ("round_robin", False)):
            answer = ask(client, SetPolicy.Request(policy=policy), lambda future, seconds:
                         rclpy.spin_until_future_complete(node, future, timeout_sec=seconds),
                         answer_s=5.0, appear_s=20.0)
            assert answer.success is ok
            assert policy in answer.message
    finally:
        peer.kill()
        peer.wait()
