"""The inference server node with the emulated backend, in process."""

import contextlib
import math
import time

import cv2
import numpy as np
import pytest

rclpy = pytest.importorskip("rclpy")
pytestmark = pytest.mark.ros

from rclpy.exceptions import InvalidParameterValueException  # noqa: E402
from rclpy.executors import SingleThreadedExecutor  # noqa: E402
from rclpy.parameter import Parameter  # noqa: E402
from rclpy.qos import qos_profile_sensor_data  # noqa: E402
from sensor_msgs.msg import CompressedImage, Image, JointState  # noqa: E402
from xinfer_ros.msg import ActionChunk, FleetStats, PolicyRequest  # noqa: E402
from xinfer_ros.srv import GetFleetStats, SetPolicy  # noqa: E402

from xinfer_ros.nodes.inference_server import InferenceServer  # noqa: E402
from xinfer_ros.serving.image_conversion import rgb_to_image_fields  # noqa: E402

from ..service_calls import ask  # noqa: E402

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
        self.compressed = [node.create_publisher(
            CompressedImage, f"/{name}/camera_{i}/image_raw/compressed",
            qos_profile_sensor_data) for i in range(3)]
        self.requests = node.create_publisher(PolicyRequest, f"/{name}/policy_request", 10)
        self.chunks: list[ActionChunk] = []
        node.create_subscription(ActionChunk, f"/{name}/action_chunk", self.chunks.append, 50)
        self.seq = 0

    def observe(self, shapes=SHAPES, state=None, *, encoding="rgb8", truncate=False,
                names=None, transport="raw") -> None:
        stamp = self.node.get_clock().now().to_msg()
        for cam, (h, w) in enumerate(shapes):
            pixels = np.full((h, w, 3), 90, np.uint8)
            if transport == "compressed":
                ok, jpeg = cv2.imencode(".jpg", pixels)
                assert ok
                out = CompressedImage(format="jpeg", data=jpeg.tobytes())
                out.header.stamp = stamp
                self.compressed[cam].publish(out)
                continue
            msg = Image(**rgb_to_image_fields(pixels))
            msg.encoding = encoding
            if truncate:
                msg.data = bytes(msg.data)[: len(msg.data) // 2]
            msg.header.stamp = stamp
            self.cams[cam].publish(msg)
        js = JointState(position=list(np.zeros(D) if state is None else state),
                        name=list(names or []))
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


@contextlib.contextmanager
def serving(**params):
    """A server on the emulated backend for r1 and r2, a peer node with stand-in robots."""
    rclpy.init()
    values = {"robots": ["r1", "r2"], "backend": "emulated", "model": "tiny",
              "robot_timeout_s": 0.5, **params}
    server = InferenceServer(
        parameter_overrides=[Parameter(k, value=v) for k, v in values.items()])
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
    try:
        yield server, peer, robots, spin
    finally:
        spinner.shutdown()
        server.close()
        server.destroy_node()
        peer.destroy_node()
        rclpy.shutdown()


@pytest.fixture
def fleet():
    with serving() as f:
        yield f


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
        ("depth image (16UC1)", lambda: (r1.observe(encoding="16UC1"), r1.request())),
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
def test_silent_robot_is_dropped_and_stats_and_policy_services_work() -> None:
    with serving(allow_set_policy=True) as fleet:
        _silent_robot_is_dropped_and_stats_and_policy_services_work(fleet)


def _silent_robot_is_dropped_and_stats_and_policy_services_work(fleet) -> None:
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
    # Stamped on the same host's clock: the age before the callback is measured.
    assert 0.0 <= by_robot["r1"].request_age_p50_ms < 400.0
    assert by_robot["r1"].stamp_attainment == 1.0
    assert stats[-1].total.requests >= 3
    assert server._robots["r1"].present is False  # silent for > 0.5 s: dropped

    def wait(future, seconds: float) -> None:
        end = time.monotonic() + seconds
        while not future.done() and time.monotonic() < end:
            spin(0.02)

    policy = peer.create_client(SetPolicy, "/inference_server/set_policy")
    get = peer.create_client(GetFleetStats, "/inference_server/get_fleet_stats")
    for name, ok in (("edf", True), ("lottery", False)):
        reply = ask(policy, SetPolicy.Request(policy=name), wait, answer_s=5.0, appear_s=5.0)
        assert reply.success is ok, reply.message
    assert server.engine.policy.name == "edf"
    got = ask(get, GetFleetStats.Request(window_s=30.0), wait, answer_s=5.0, appear_s=5.0)
    assert got.stats.policy == "edf" and got.stats.window_s == 30.0


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
        if freed is None and not state.present and server.ledger.live("r1") == 0:
            freed = time.monotonic() - died
    assert freed is not None and freed < 1.0
    with pytest.raises(Exception, match="no camera_0"):
        server._robots["r1"].obs.assemble(time.time(), 10.0)


# -- phase spreading -------------------------------------------------------------------
# With phase_spread, an OK response ready later than T_E after its request arrived may be
# held (never past deadline - margin) so its robot's next request lands in the widest
# gap between the other robots' arrival phases.


@pytest.fixture
def slow_table(tmp_path):
    """A rate table whose stages take 80 ms each alone: every response is later than T_E."""
    from xinfer_ros.core.rate_table import interference_model_table, write_rate_table

    return str(write_rate_table(interference_model_table(work=(0.08, 0.08, 0.08)),
                                tmp_path / "slow.json"))


def _spy(server):
    """Wrap the server's spreader so the other robot's phase sits exactly where r1's next
    request would land if its response went out at once; the widest gap's middle is then
    half a period later, so the response is held about T_E / 2. Returns the calls seen."""
    from xinfer_ros.core.constants import DELTA

    spreader = server.engine.releases.spreader
    release_time = spreader.release_time
    calls = []

    def spy(robot, ready, arrival, deadline):
        spreader.record_arrival("r2", ready + DELTA)
        release = release_time(robot, ready, arrival, deadline)
        calls.append((ready, arrival, deadline, release))
        return release

    spreader.release_time = spy
    return calls


@pytest.mark.timeout(60)
def test_phase_spread_holds_a_late_response_within_its_deadline(slow_table) -> None:
    with serving(phase_spread=True, **{"emulated.rate_table": slow_table}) as f:
        server, _, robots, spin = f
        assert server.params["phase_spread"] is True
        assert server.params["phase_spread_margin_ms"] == 10.0
        calls = _spy(server)
        r1 = robots["r1"]
        r1.observe()
        spin(0.1)
        chunk = answer(r1, r1.request(budget_ms=1500.0), spin)
        assert chunk.status == ActionChunk.STATUS_OK, chunk.reason
        assert len(calls) == 1
        ready, arrival, deadline, release = calls[0]
        assert ready - arrival > 0.180  # later than T_E: may be held
        assert deadline == pytest.approx(arrival + 1.5 - 0.004)
        assert release - ready == pytest.approx(0.090, abs=1e-6)  # half a period
        t = chunk.timing
        published = arrival + t.server_total_ms / 1e3
        assert release <= published <= deadline - 0.010 + 0.005  # margin less thread delay
        assert t.hold_ms == pytest.approx((published - ready) * 1e3, abs=1.0)
        assert 85.0 <= t.hold_ms < 140.0
        assert t.server_total_ms >= t.hold_ms + t.vit_ms + t.prefill_ms + t.action_ms
        assert t.budget_met
        held, held_s = server.ledger.held()
        assert held == 1 and held_s == pytest.approx(t.hold_ms / 1e3)


@pytest.mark.timeout(60)
def test_without_phase_spread_nothing_is_held(slow_table) -> None:
    with serving(**{"emulated.rate_table": slow_table}) as f:
        server, _, robots, spin = f
        assert server.params["phase_spread"] is False
        assert server.engine.releases.spreader is None and server._releases is None
        r1, r2 = robots["r1"], robots["r2"]
        for _ in range(2):
            r1.observe()
            r2.observe()
            spin(0.05)
            seqs = (r1.request(budget_ms=1500.0), r2.request(budget_ms=1500.0))
            for robot, seq in zip((r1, r2), seqs, strict=True):
                chunk = answer(robot, seq, spin)
                assert chunk.status == ActionChunk.STATUS_OK, chunk.reason
                assert chunk.timing.server_total_ms > 180.0  # late, but not held
                assert chunk.timing.hold_ms == 0.0 and chunk.timing.budget_met
        assert server.ledger.held() == (0, 0.0)


def _result(status, hold_s=0.0, actions=True):
    from xinfer_ros.engine.types import EngineResult, StageTimings

    timings = StageTimings(queue_ms=1.0, vit_ms=5.0, prefill_ms=9.0, action_ms=12.0,
                           output_ms=1.0, lane_ms=2.5)
    return EngineResult(1, "r1", status, reason="" if status == 0 else "crafted",
                        actions=np.zeros((H, D)) if actions else None, timings=timings,
                        finished=10.0, release_at=10.0 + hold_s)


def _deliver(server, seq, budget_ms, age_s, *, hold_s=0.0, status=0):
    """Hand the server a crafted engine result for r1, whose request arrived ``age_s``
    ago and which the engine releases ``hold_s`` after it is ready."""
    from builtin_interfaces.msg import Time

    from xinfer_ros.core.timing import budget_seconds
    from xinfer_ros.nodes.inference_server import _Received

    req = PolicyRequest(robot_id="r1", seq=seq, budget_ms=budget_ms, commit_steps=8,
                        keyframe_spacing_s=0.03)
    server.ledger.submitted("r1")  # as _on_request does before submitting
    arrival = time.monotonic() - age_s
    server._on_result(_Received("r1", req, arrival, budget_seconds(budget_ms)),
                      ([Time()] * 3, Time()), _result(status, hold_s, status == 0))
    return arrival


@pytest.mark.timeout(60)
def test_a_held_result_is_published_at_its_release_time() -> None:
    with serving(phase_spread=True) as f:
        server, _, robots, spin = f
        r1 = robots["r1"]
        # The engine held it 100 ms: published then, and the chunk says so.
        arrival = _deliver(server, 1, 400.0, 0.250, hold_s=0.100)
        assert server._releases.pending == 1
        chunk = answer(r1, 1, spin)
        assert chunk.status == ActionChunk.STATUS_OK and (chunk.horizon, chunk.action_dim) == (H, D)
        t = chunk.timing
        assert 95.0 <= t.hold_ms < 150.0
        assert t.queue_ms == 3.5  # the ready queues' wait and the lanes'
        assert arrival + t.server_total_ms / 1e3 <= arrival + 0.400 - 0.004
        assert t.budget_met and t.budget_ms == 400.0
        # Released at once: never queued.
        _deliver(server, 2, 400.0, 0.050)
        assert server._releases.pending == 0
        assert answer(r1, 2, spin).timing.hold_ms == 0.0
        # A failed request is published at once and never meets its budget.
        _deliver(server, 3, 400.0, 0.050, status=3)
        chunk = answer(r1, 3, spin)
        assert chunk.status == ActionChunk.STATUS_ERROR and chunk.reason == "crafted"
        assert chunk.timing.hold_ms == 0.0 and not chunk.timing.budget_met
        assert server.ledger.held()[0] == 1
        assert server.ledger.live("r1") == 0


@pytest.mark.timeout(60)
def test_phase_spread_forgets_a_silent_robot_and_close_flushes_held_chunks() -> None:
    with serving(phase_spread=True) as f:
        server, _, robots, spin = f
        r1 = robots["r1"]
        r1.observe()
        spin(0.05)
        # A wide budget (> T_E) gives the robot no phase to avoid; a tight one does.
        assert answer(r1, r1.request(budget_ms=400.0), spin).status == ActionChunk.STATUS_OK
        spreader = server.engine.releases.spreader
        assert "r1" not in spreader._arrivals
        r1.observe()
        spin(0.05)
        assert answer(r1, r1.request(budget_ms=90.0), spin).status == ActionChunk.STATUS_OK
        assert "r1" in spreader._arrivals
        spin(0.8)  # silent longer than robot_timeout_s
        assert server._robots["r1"].present is False
        assert "r1" not in spreader._arrivals  # the engine's cancel forgot it
        # A chunk held at shutdown goes out at once instead of being lost.
        _deliver(server, 9, 2000.0, 0.250, hold_s=0.5)
        assert server._releases.pending == 1
        server._releases.close(run_pending=True)
        chunk = answer(r1, 9, spin, timeout=1.0)
        assert chunk.status == ActionChunk.STATUS_OK and chunk.timing.hold_ms < 50.0
        # After close nothing is held: a late response is published at once.
        _deliver(server, 10, 2000.0, 0.250, hold_s=0.5)
        assert answer(r1, 10, spin, timeout=1.0).timing.hold_ms == 0.0


@pytest.mark.timeout(30)
def test_phase_spread_margin_is_validated() -> None:
    rclpy.init()
    try:
        for bad in (-1.0, 1000.5):
            # rclpy enforces the descriptor's range itself, before the node validates.
            with pytest.raises((ValueError, InvalidParameterValueException),
                               match="phase_spread_margin_ms"):
                InferenceServer(parameter_overrides=[
                    Parameter("robots", value=["r1"]), Parameter("backend", value="emulated"),
                    Parameter("phase_spread", value=True),
                    Parameter("phase_spread_margin_ms", value=bad)])
    finally:
        rclpy.shutdown()


@pytest.mark.timeout(60)
def test_pi0_server_takes_robot_sized_images_and_answers_with_its_horizon() -> None:
    with serving(model="pi0-tiny") as (server, _, robots, spin):
        assert server.io.resizes_images and server.io.horizon == 50
        r1 = robots["r1"]
        r1.observe(shapes=[(480, 640), (100, 100), (224, 320)])  # whatever the robot has
        spin(0.2)
        chunk = answer(r1, r1.request(), spin)
        assert chunk.status == ActionChunk.STATUS_OK, chunk.reason
        assert (chunk.horizon, chunk.action_dim) == (50, 14)


def test_camera_count_must_fit_the_model() -> None:
    rclpy.init()
    try:
        server = InferenceServer(parameter_overrides=[
            Parameter("backend", value="emulated"), Parameter("model", value="pi0-tiny"),
            Parameter("cameras", value=2)])
        assert server.io.masks_missing_cameras
        server.close()
        server.destroy_node()
        for model, cameras in (("tiny", 2), ("pi0-tiny", 4)):
            with pytest.raises(ValueError, match="parameter 'cameras'"):
                InferenceServer(parameter_overrides=[
                    Parameter("backend", value="emulated"), Parameter("model", value=model),
                    Parameter("cameras", value=cameras)])
    finally:
        rclpy.shutdown()


def test_unusable_model_path_stops_the_server_at_start_up(tmp_path) -> None:
    rclpy.init()
    try:
        with pytest.raises(ValueError, match=r"no config\.json"):
            InferenceServer(parameter_overrides=[
                Parameter("backend", value="emulated"), Parameter("model", value="pi0"),
                Parameter("model_path", value=str(tmp_path))])
    finally:
        rclpy.shutdown()


@pytest.mark.timeout(60)
def test_frames_of_another_size_are_letterboxed_unless_strict() -> None:
    with serving() as (server, _, robots, spin):
        r1 = robots["r1"]
        r1.observe(shapes=[(100, 100)] * 3)  # the reference model takes 224x352, 224x320
        spin(0.2)
        assert answer(r1, r1.request(), spin).status == ActionChunk.STATUS_OK
        frame = np.full((100, 100, 3), 90, np.uint8)
        now = server.get_clock().now().nanoseconds * 1e-9
        raw = server._robots["r1"].obs.assemble(now, 10.0)[0][0]
        letterboxed = server._rgb(0, raw, raw.message())
        assert letterboxed.shape == (224, 352, 3) and not letterboxed[:, :50].any()
        assert (letterboxed[:, 176] == frame[0, 0]).all()
    with serving(strict_image_size=True) as (_, _, robots, spin):
        r1 = robots["r1"]
        r1.observe(shapes=[(100, 100)] * 3)
        spin(0.2)
        chunk = answer(r1, r1.request(), spin)
        assert chunk.status == ActionChunk.STATUS_REJECTED
        assert "camera_0: image is 100x100" in chunk.reason and "strict" in chunk.reason


@pytest.mark.timeout(60)
def test_compressed_camera_topics_per_parameter() -> None:
    with serving(image_transports=["compressed"]) as (server, _, robots, spin):
        assert "/r1/camera_2/image_raw/compressed" in server._sensor_types
        r1 = robots["r1"]
        r1.observe()  # raw frames only: not what this server reads
        spin(0.2)
        assert "camera_0" in answer(r1, r1.request(), spin).reason
        r1.observe(transport="compressed")
        spin(0.3)
        chunk = answer(r1, r1.request(), spin)
        assert chunk.status == ActionChunk.STATUS_OK, chunk.reason
    rclpy.init()
    try:
        with pytest.raises(ValueError, match="image_transports"):
            InferenceServer(parameter_overrides=[
                Parameter("backend", value="emulated"), Parameter("model", value="tiny"),
                Parameter("image_transports", value=["raw", "compressed"])])
    finally:
        rclpy.shutdown()


@pytest.mark.timeout(60)
def test_joints_are_read_by_name() -> None:
    names = [f"j{i}" for i in range(D)]
    with serving(joint_names=names) as (_, _, robots, spin):
        r1 = robots["r1"]
        r1.observe(names=list(reversed(names)))  # any order the driver publishes
        spin(0.2)
        assert answer(r1, r1.request(), spin).status == ActionChunk.STATUS_OK
        r1.observe(names=["elbow", *names[1:]])
        spin(0.2)
        chunk = answer(r1, r1.request(), spin)
        assert chunk.status == ActionChunk.STATUS_REJECTED and "lacks joint(s) ['j0']" in \
            chunk.reason


def test_joint_positions_follow_the_models_order() -> None:
    from xinfer_ros.serving.observations import ObservationError, joint_positions

    assert joint_positions(["b", "a"], [2.0, 1.0], ["a", "b"]) == [1.0, 2.0]
    assert joint_positions([], [3.0, 4.0], []) == [3.0, 4.0]
    with pytest.raises(ObservationError, match="names"):
        joint_positions(["a"], [1.0, 2.0], ["a"])


@pytest.mark.timeout(60)
def test_diagnostics_per_robot_and_for_the_server() -> None:
    from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus

    with serving(**{"diagnostics.error_threshold": 2}) as (_, peer, robots, spin):
        arrays: list[DiagnosticArray] = []
        peer.create_subscription(DiagnosticArray, "/diagnostics", arrays.append, 10)
        r1 = robots["r1"]
        for _ in range(2):  # two failures: NaN joint states
            r1.observe(state=[math.nan] * D)
            answer(r1, r1.request(), spin)
        spin(1.3)
        status = {s.name: s for s in arrays[-1].status}
        assert status["xinfer/robots/r1"].level == DiagnosticStatus.ERROR
        assert "2 of 2 requests failed: joint_states: position contains NaN" in \
            status["xinfer/robots/r1"].message
        assert status["xinfer/robots/r2"].level == DiagnosticStatus.STALE
        server = status["xinfer/server"]
        values = {v.key: v.value for v in server.values}
        assert values["model"] == "tiny" and values["backend"] == "emulated"
        assert int(values["rss_mib"]) > 10 and server.level == DiagnosticStatus.OK


@pytest.mark.timeout(60)
def test_frames_beyond_the_byte_budget_are_refused_with_a_visible_reason() -> None:
    from diagnostic_msgs.msg import DiagnosticArray

    # 1 MiB per robot: the 224x352 and two 224x320 rgb8 frames (0.65 MiB) fit once;
    # 480x640 frames (0.88 MiB each) do not fit beside each other.
    with serving(max_frame_bytes_per_robot=2**20) as (server, peer, robots, spin):
        arrays: list[DiagnosticArray] = []
        peer.create_subscription(DiagnosticArray, "/diagnostics", arrays.append, 10)
        r1 = robots["r1"]
        for _ in range(3):
            r1.observe()
            spin(0.1)
        assert answer(r1, r1.request(), spin).status == ActionChunk.STATUS_OK
        assert server._robots["r1"].obs.frame_bytes <= 2**20
        spin(0.6)  # the frames that fitted age out
        r1.observe(shapes=[(480, 640)] * 3)
        spin(0.2)
        chunk = answer(r1, r1.request(), spin)
        assert chunk.status == ActionChunk.STATUS_REJECTED
        assert "refused" in chunk.reason and "max_frame_bytes_per_robot=1048576" in chunk.reason
        for _ in range(7):  # a fleet_stats round, which carries the diagnostics
            r1.observe(shapes=[(480, 640)] * 3)
            spin(0.2)
        status = {s.name: {v.key: v.value for v in s.values} for s in arrays[-1].status}
        assert int(status["xinfer/robots/r1"]["frames_refused"]) >= 2
        assert float(status["xinfer/robots/r1"]["frame_mib"]) <= 1.0
        server_values = status["xinfer/server"]
        assert server_values["frame_budget_mib"] == "2"  # two robots on the allowlist
        assert server_values["batching"] == "off (max_batch 1)"  # the emulated device
        assert int(server_values["frames_refused"]) >= 2
        assert 0 < float(server_values["frame_store_mib"]) <= 2.0


def test_set_policy_is_off_unless_asked_for() -> None:
    with serving() as (server, _, _, spin):
        spin(0.2)
        services = dict(server.get_service_names_and_types())
        assert "/inference_server/get_fleet_stats" in services
        assert "/inference_server/set_policy" not in services


@pytest.mark.timeout(60)
def test_two_named_servers_share_a_domain_each_with_its_own_robots_and_statistics() -> None:
    from diagnostic_msgs.msg import DiagnosticArray

    rclpy.init()
    servers = [InferenceServer(
        cli_args=["--ros-args", "-r", f"__node:={name}"],
        parameter_overrides=[Parameter(k, value=v) for k, v in {
            "server_name": name, "robots": [robot], "backend": "emulated", "model": "tiny",
            "robot_timeout_s": 5.0}.items()])
        for name, robot in (("gpu_a", "r1"), ("gpu_b", "r2"))]
    peer = rclpy.create_node("robots")
    spinner = SingleThreadedExecutor()
    for node in (*servers, peer):
        spinner.add_node(node)
    stats: dict[str, list] = {"gpu_a": [], "gpu_b": []}
    names: set[str] = set()
    for name, got in stats.items():
        peer.create_subscription(FleetStats, f"/xinfer/{name}/fleet_stats", got.append, 10)
    peer.create_subscription(DiagnosticArray, "/diagnostics",
                             lambda m: names.update(s.name for s in m.status), 10)

    def spin(seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            spinner.spin_once(timeout_sec=0.005)

    try:
        robots = {n: Robot(peer, n) for n in ("r1", "r2")}
        spin(0.5)
        for robot in robots.values():
            robot.observe()
        spin(0.2)
        for robot in robots.values():
            chunk = answer(robot, robot.request(), spin)
            assert chunk.status == ActionChunk.STATUS_OK, chunk.reason
        spin(1.3)  # a statistics period
        assert [r.robot_id for r in stats["gpu_a"][-1].robots] == ["r1"]
        assert [r.robot_id for r in stats["gpu_b"][-1].robots] == ["r2"]
        assert {"xinfer/gpu_a/server", "xinfer/gpu_b/server", "xinfer/gpu_a/robots/r1",
                "xinfer/gpu_b/robots/r2"} <= names
        services = {n for n, _ in peer.get_service_names_and_types()}
        assert {"/gpu_a/get_fleet_stats", "/gpu_b/get_fleet_stats"} <= services
    finally:
        spinner.shutdown()
        for node in servers:
            node.close()
            node.destroy_node()
        peer.destroy_node()
        rclpy.shutdown()


@pytest.mark.timeout(30)
def test_a_named_server_answers_requests_addressed_to_it_and_announces_itself() -> None:
    from xinfer_ros.msg import ServerStatus

    with serving(server_name="gpu_a", capacity=7, heartbeat_period_s=0.05) as (
            server, peer, robots, spin):
        beats: list[ServerStatus] = []
        peer.create_subscription(ServerStatus, "/xinfer/servers", beats.append, 10)
        r1 = robots["r1"]
        for server_name, answered in (("gpu_b", False), ("gpu_a", True), ("", True)):
            r1.observe()
            r1.seq += 1
            msg = PolicyRequest(robot_id="r1", seq=r1.seq, budget_ms=400.0, commit_steps=8,
                                keyframe_spacing_s=0.03, server=server_name)
            msg.header.stamp = peer.get_clock().now().to_msg()
            r1.requests.publish(msg)
            spin(0.4)
            got = [c for c in r1.chunks if c.seq == r1.seq]
            assert bool(got) == answered, server_name
            assert all(c.server == "gpu_a" and c.status == ActionChunk.STATUS_OK for c in got)
        assert beats and beats[-1].server_name == "gpu_a" and beats[-1].capacity == 7
        assert sorted(beats[-1].candidates) == ["r1", "r2"]
        assert list(beats[-1].serving) == ["r1"] and beats[-1].accepting
        # The heartbeat carries the attainment of the latest fleet_stats (1 Hz): wait
        # for one computed after an answer (a race on a loaded machine otherwise).
        end = time.monotonic() + 3.0
        while math.isnan(beats[-1].attainment) and time.monotonic() < end:
            spin(0.1)
        assert beats[-1].attainment == 1.0
        server.engine.close(drain_timeout=0.0)
        spin(0.2)
        assert not beats[-1].accepting  # a stopped engine takes no robots


def test_strangers_on_a_robots_topics_are_reported_by_name(fleet) -> None:
    """A second requester under r1's name and a second answerer of r2 are a WARN each."""
    from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus

    server, peer, robots, spin = fleet
    stranger = rclpy.create_node("stranger")
    try:
        stranger.create_publisher(PolicyRequest, "/r1/policy_request", 10)
        stranger.create_publisher(ActionChunk, "/r2/action_chunk", 10)
        arrays: list[DiagnosticArray] = []
        peer.create_subscription(DiagnosticArray, "/diagnostics", arrays.append, 10)
        end = time.monotonic() + 5.0
        while time.monotonic() < end and set(server._strangers) != {"r1", "r2"}:
            spin(0.2)
            server._check_graph()  # its timer runs every 5 s
        robots["r1"].observe()
        robots["r1"].request()
        spin(1.3)  # a fleet_stats round, which carries the diagnostics
        status = {s.name: s for s in arrays[-1].status}
        r1 = status["xinfer/robots/r1/publishers"]
        assert r1.level == DiagnosticStatus.WARN
        assert "2 publishers on policy_request" in r1.message and "/stranger" in r1.message
        assert "/robots" in r1.message  # the robot's own requester, named beside it
        r2 = status["xinfer/robots/r2/publishers"]
        assert "another node publishes action_chunk" in r2.message
        assert "/stranger" in r2.message and "/inference_server" not in r2.message
        assert "xinfer/robots/intruder/publishers" not in status  # not served: not checked
    finally:
        stranger.destroy_node()


@pytest.mark.timeout(60)
def test_lifecycle_inactive_refuses_active_serves_deactivate_stops_at_once() -> None:
    """Unconfigured: nothing subscribed. Inactive: REJECTED. Active: OK. Deactivate: no OK after."""
    from lifecycle_msgs.msg import State

    with serving(autostart=False) as (server, _, robots, spin):
        r1 = robots["r1"]
        r1.observe()
        r1.request()
        spin(0.4)
        assert r1.chunks == []  # unconfigured: nothing subscribed, nothing answered
        server.trigger_configure()
        spin(0.5)  # discovery of the new subscriptions
        r1.observe()
        spin(0.1)
        chunk = answer(r1, r1.request(), spin)
        assert chunk.status == ActionChunk.STATUS_REJECTED and "inactive" in chunk.reason
        server.trigger_activate()
        r1.observe()
        spin(0.1)
        chunk = answer(r1, r1.request(), spin)
        assert chunk.status == ActionChunk.STATUS_OK, chunk.reason
        # A request in the engine when deactivated: answered, never OK.
        r1.observe()
        spin(0.05)
        live = r1.request(budget_ms=400.0)
        spin(0.01)
        server.trigger_deactivate()
        assert server._state_machine.current_state[1] == "inactive"
        assert answer(r1, live, spin).status != ActionChunk.STATUS_OK
        r1.observe()
        spin(0.1)
        chunk = answer(r1, r1.request(), spin)
        assert chunk.status == ActionChunk.STATUS_REJECTED and "inactive" in chunk.reason
        server.trigger_cleanup()
        assert server._state_machine.current_state[0] == State.PRIMARY_STATE_UNCONFIGURED


@pytest.mark.timeout(60)
def test_a_second_requester_does_not_supersede_the_robots_requests(fleet) -> None:
    """Another session's request (or a replayed one) is REJECTED and the live one stays OK."""
    server, peer, robots, spin = fleet
    r1 = robots["r1"]
    own = PolicyRequest(robot_id="r1", seq=10, budget_ms=400.0, commit_steps=8,
                        keyframe_spacing_s=0.03)
    own.header.frame_id = "executor-session"
    r1.observe()
    spin(0.1)

    def send(seq: int, frame_id: str, stamp=None) -> PolicyRequest:
        msg = PolicyRequest(robot_id="r1", seq=seq, budget_ms=400.0, commit_steps=8,
                            keyframe_spacing_s=0.03)
        msg.header.frame_id = frame_id
        msg.header.stamp = stamp or peer.get_clock().now().to_msg()
        r1.requests.publish(msg)
        return msg

    first = send(10, "executor-session")
    spin(0.02)
    send(11, "forger")  # another session, newer seq: supersedes nothing
    send(10, "executor-session", first.header.stamp)  # the live request replayed
    forged = answer(r1, 11, spin)
    assert forged.status == ActionChunk.STATUS_REJECTED
    assert "second requester" in forged.reason
    replay = [c for c in r1.chunks if c.seq == 10 and c.status == ActionChunk.STATUS_REJECTED]
    own_ok = [c for c in r1.chunks if c.seq == 10 and c.status == ActionChunk.STATUS_OK]
    end = time.monotonic() + 3.0
    while time.monotonic() < end and not (replay and own_ok):
        spin(0.02)
        replay = [c for c in r1.chunks if c.seq == 10 and c.status == ActionChunk.STATUS_REJECTED]
        own_ok = [c for c in r1.chunks if c.seq == 10 and c.status == ActionChunk.STATUS_OK]
    assert own_ok and replay and "repeats or precedes" in replay[0].reason
    send(12, "executor-session")
    assert answer(r1, 12, spin).status == ActionChunk.STATUS_OK
    stats = server.fleet_stats()
    (mine,) = [r for r in stats.robots if r.robot_id == "r1"]
    assert (mine.requests, mine.errors) == (2, 0)  # the refused ones are not r1's
    assert server.sessions.refused["r1"] == 2
    # The session ends when its requests stop (robot_timeout_s): a restarted executor
    # with a new id is served.
    spin(0.6)
    r1.observe()
    spin(0.1)
    send(1, "restarted")
    assert answer(r1, 1, spin).status == ActionChunk.STATUS_OK


@pytest.mark.timeout(60)
def test_the_openpi_endpoint_follows_the_lifecycle() -> None:
    """An inactive server's openpi endpoint refuses inference as its ROS topics do."""
    import socket

    from xinfer_ros.openpi.client import OpenPIClient, ServerError

    with socket.socket() as probe:  # openpi_port 0 means off: take a free port
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    obs = {"observation/image": np.zeros((64, 64, 3), np.uint8),
           "observation/wrist_image": np.zeros((64, 64, 3), np.uint8),
           "observation/state": np.zeros(7), "prompt": "x"}
    with (serving(autostart=False, openpi_port=port, openpi_layout="libero") as (server, *_),
          OpenPIClient(f"ws://127.0.0.1:{port}/web_arm") as client):
        with pytest.raises(ServerError, match="inactive"):
            client.infer(obs)
        server.trigger_configure()
        server.trigger_activate()
        assert client.infer(obs)["actions"].shape == (16, 7)
        server.trigger_deactivate()
        with pytest.raises(ServerError, match="inactive"):
            client.infer(obs)


@pytest.mark.timeout(60)
def test_a_camera_silent_while_its_robot_talks_is_subscribed_afresh() -> None:
    """A reader that stopped delivering one camera is replaced, and frames flow again."""
    with serving(camera_resubscribe_s=0.6) as (server, _, robots, spin):
        r1 = robots["r1"]
        first = server._camera_subs[("r1", 2)]
        r1.observe()
        spin(0.2)
        assert answer(r1, r1.request(), spin).status == ActionChunk.STATUS_OK
        # Only cameras 0 and 1 and the joint states arrive now, with requests.
        end = time.monotonic() + 1.5
        while time.monotonic() < end:
            r1.observe(shapes=SHAPES[:2])
            r1.request()
            spin(0.1)
        fresh = server._camera_subs[("r1", 2)]
        assert fresh is not first and fresh in server._entities
        assert first not in server._entities
        assert server._camera_subs[("r1", 0)] in server._entities  # the others stay
        spin(0.3)  # discovery of the new reader
        r1.observe()
        spin(0.2)
        chunk = answer(r1, r1.request(), spin)
        assert chunk.status == ActionChunk.STATUS_OK, chunk.reason


@pytest.mark.timeout(60)
def test_a_request_waits_briefly_for_a_frame_delivered_after_it(fleet) -> None:
    """Frames late behind their request (a stall, a loaded machine) are waited for."""
    server, _, robots, spin = fleet
    r1, r2 = robots["r1"], robots["r2"]
    seq = r1.request()  # before any frame of r1 reached the server
    spin(0.05)
    r1.observe()  # taken just after the request: it stands in
    chunk = answer(r1, seq, spin)
    assert chunk.status == ActionChunk.STATUS_OK, chunk.reason
    sent = time.monotonic()
    chunk = answer(r2, r2.request(), spin)  # r2 never sends a frame
    waited = time.monotonic() - sent
    assert chunk.status == ActionChunk.STATUS_REJECTED
    assert "no camera_0/image_raw received yet" in chunk.reason
    assert waited >= server.params["observation_wait_s"] == 0.2
