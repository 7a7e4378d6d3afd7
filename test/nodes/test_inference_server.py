"""The inference server node with the emulated backend, in process."""

import math
import time

import numpy as np
import pytest

rclpy = pytest.importorskip("rclpy")
pytestmark = pytest.mark.ros

from rclpy.executors import SingleThreadedExecutor  # noqa: E402
from rclpy.parameter import Parameter  # noqa: E402
from rclpy.qos import qos_profile_sensor_data  # noqa: E402
from sensor_msgs.msg import Image, JointState  # noqa: E402
from xinfer_ros.msg import ActionChunk, FleetStats, PolicyRequest  # noqa: E402
from xinfer_ros.srv import GetFleetStats, SetPolicy  # noqa: E402

from xinfer_ros.nodes.image_conversion import rgb_to_image_fields  # noqa: E402
from xinfer_ros.nodes.inference_server import InferenceServer  # noqa: E402

SHAPES = [(224, 352), (224, 320), (224, 320)]
H, D = 16, 14


class Robot:
    """A stand-in robot publishing cameras, joint states and requests."""

    def __init__(self, node, name: str) -> None:
        self.node, self.name = node, name
        self.cams = [node.create_publisher(Image, f"/{name}/camera_{i}/image_raw",
                                           qos_profile_sensor_data) for i in range(3)]
        self.joints = node.create_publisher(JointState, f"/{name}/joint_states",
                                            qos_profile_sensor_data)
        self.requests = node.create_publisher(PolicyRequest, f"/{name}/policy_request", 10)
        self.chunks: list[ActionChunk] = []
        node.create_subscription(ActionChunk, f"/{name}/action_chunk", self.chunks.append, 50)
        self.seq = 0

    def observe(self, shapes=SHAPES, state=None, encoding="rgb8", truncate=False) -> None:
        stamp = self.node.get_clock().now().to_msg()
        for pub, (h, w) in zip(self.cams, shapes, strict=True):
            msg = Image(**rgb_to_image_fields(np.full((h, w, 3), 90, np.uint8)))
            msg.encoding = encoding
            if truncate:
                msg.data = bytes(msg.data)[: len(msg.data) // 2]
            msg.header.stamp = stamp
            pub.publish(msg)
        js = JointState(position=list(np.zeros(D) if state is None else state))
        js.header.stamp = stamp
        self.joints.publish(js)

    def request(self, budget_ms=400.0, prev=None, commit=8) -> int:
        self.seq += 1
        msg = PolicyRequest(robot_id=self.name, seq=self.seq, budget_ms=budget_ms,
                            commit_steps=commit, keyframe_spacing_s=0.03)
        msg.header.stamp = self.node.get_clock().now().to_msg()
        if prev is not None:
            msg.prev_chunk = list(np.ravel(prev).astype(float))
            msg.prev_horizon, msg.prev_action_dim = H, D
        self.requests.publish(msg)
        return self.seq


@pytest.fixture
def fleet():
    rclpy.init()
    server = InferenceServer(parameter_overrides=[
        Parameter("robots", value=["r1", "r2"]), Parameter("backend", value="emulated"),
        Parameter("robot_timeout_s", value=0.5)])
    peer = rclpy.create_node("robots")
    spinner = SingleThreadedExecutor()
    spinner.add_node(server)
    spinner.add_node(peer)

    def spin(seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            spinner.spin_once(timeout_sec=0.005)

    robots = {n: Robot(peer, n) for n in ("r1", "r2", "intruder")}
    spin(0.5)  # discovery
    yield server, peer, robots, spin
    spinner.shutdown()
    server.close()
    server.destroy_node()
    peer.destroy_node()
    rclpy.shutdown()


def answer(robot: Robot, seq: int, spin, timeout: float = 3.0) -> ActionChunk:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        spin(0.02)
        for chunk in robot.chunks:
            if chunk.seq == seq:
                return chunk
    raise AssertionError(f"no chunk for {robot.name} seq {seq}")


@pytest.mark.timeout(60)
def test_valid_request_gets_ok_chunk_with_stamps_and_timings(fleet) -> None:
    _, _, robots, spin = fleet
    r1 = robots["r1"]
    r1.observe()
    spin(0.2)
    chunk = answer(r1, r1.request(budget_ms=400.0), spin)
    assert chunk.status == ActionChunk.STATUS_OK, chunk.reason
    assert (chunk.horizon, chunk.action_dim, len(chunk.actions)) == (H, D, H * D)
    assert len(chunk.image_stamps) == 3 and chunk.state_stamp.sec > 0
    t = chunk.timing
    assert t.vit_ms > 0 and t.prefill_ms > 0 and t.action_ms > 0
    assert t.server_total_ms >= t.vit_ms + t.prefill_ms + t.action_ms
    assert t.budget_ms == 400.0 and t.budget_met


@pytest.mark.timeout(90)
def test_bad_requests_get_non_ok_chunks_and_others_keep_being_served(fleet) -> None:
    _, _, robots, spin = fleet
    r1, r2 = robots["r1"], robots["r2"]
    r2.observe()
    spin(0.2)
    cases = [
        ("budget", lambda: (r1.observe(), r1.request(budget_ms=0.0))),
        ("budget", lambda: (r1.observe(), r1.request(budget_ms=1e9))),
        ("budget", lambda: (r1.observe(), r1.request(budget_ms=math.nan))),
        ("prev_chunk", lambda: (r1.observe(), r1.request(prev=np.zeros(H * D - 3)))),
        ("commit_steps", lambda: (r1.observe(), r1.request(commit=H + 1))),
        ("camera_0 image is 100x100", lambda: (r1.observe(shapes=[(100, 100)] * 3),
                                               r1.request())),
        ("encoding", lambda: (r1.observe(encoding="yuv422"), r1.request())),
        ("truncated", lambda: (r1.observe(truncate=True), r1.request())),
        ("NaN", lambda: (r1.observe(state=[math.nan] * D), r1.request())),
    ]
    for expected, send in cases:
        _, seq = send()
        spin(0.05)
        chunk = answer(r1, seq, spin)
        assert chunk.status == ActionChunk.STATUS_REJECTED, (expected, chunk.reason)
        assert expected in chunk.reason
        r2.observe()
        ok = answer(r2, r2.request(), spin)
        assert ok.status == ActionChunk.STATUS_OK, ok.reason


@pytest.mark.timeout(60)
def test_non_allowlisted_robot_is_ignored(fleet) -> None:
    server, _, robots, spin = fleet
    intruder = robots["intruder"]
    intruder.observe()
    intruder.request()
    spin(0.5)
    assert intruder.chunks == []
    server._check_graph()
    assert "intruder" in server._warned


@pytest.mark.timeout(60)
def test_silent_robot_is_dropped_and_stats_and_policy_services_work(fleet) -> None:
    server, peer, robots, spin = fleet
    r1 = robots["r1"]
    for _ in range(3):
        r1.observe()
        spin(0.05)
        assert answer(r1, r1.request(budget_ms=200.0), spin).status == ActionChunk.STATUS_OK
    stats: list[FleetStats] = []
    peer.create_subscription(FleetStats, "/xinfer/fleet_stats", stats.append, 10)
    spin(1.2)
    assert stats and stats[-1].policy == "xinfer"
    by_robot = {r.robot_id: r for r in stats[-1].robots}
    assert by_robot["r1"].requests == 3 and by_robot["r1"].attainment == 1.0
    assert stats[-1].total.requests >= 3
    assert server._robots["r1"].present is False  # silent for > 0.5 s: dropped

    policy = peer.create_client(SetPolicy, "/inference_server/set_policy")
    get = peer.create_client(GetFleetStats, "/inference_server/get_fleet_stats")
    assert policy.wait_for_service(timeout_sec=5.0) and get.wait_for_service(timeout_sec=5.0)
    for name, ok in (("edf", True), ("lottery", False)):
        future = policy.call_async(SetPolicy.Request(policy=name))
        end = time.monotonic() + 5.0
        while not future.done() and time.monotonic() < end:
            spin(0.02)
        assert future.result().success is ok, future.result().message
    assert server.engine.policy.name == "edf"
    future = get.call_async(GetFleetStats.Request(window_s=30.0))
    end = time.monotonic() + 5.0
    while not future.done() and time.monotonic() < end:
        spin(0.02)
    assert future.result().stats.policy == "edf" and future.result().stats.window_s == 30.0


@pytest.mark.timeout(60)
def test_killed_robot_is_freed_within_a_second_and_others_unaffected(fleet) -> None:
    server, _, robots, spin = fleet
    r1, r2 = robots["r1"], robots["r2"]
    r1.observe()
    r2.observe()
    spin(0.1)
    r1.request(budget_ms=400.0)  # r1 "dies" right after sending
    died = time.monotonic()
    freed = None
    while time.monotonic() - died < 1.5:
        r2.observe()
        assert answer(r2, r2.request(), spin).status == ActionChunk.STATUS_OK
        state = server._robots["r1"]
        if freed is None and not state.present and state.live == 0:
            freed = time.monotonic() - died
    assert freed is not None and freed < 1.0
    with pytest.raises(Exception, match="no camera_0"):
        server._robots["r1"].obs.assemble(time.time(), 10.0)
