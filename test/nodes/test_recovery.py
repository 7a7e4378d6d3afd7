"""A real server and an executor: recovery after a stall, and a stranger on the topics.

Recovery: SIGSTOP the server for 3 s, SIGCONT, time the first OK chunk.

Run with ``-s`` to see the figure (docs/BENCHMARKS.md quotes it)::

    python -m pytest test/nodes/test_recovery.py -s -m slow
"""

import signal
import time

import numpy as np
import pytest

rclpy = pytest.importorskip("rclpy")
pytestmark = [pytest.mark.ros, pytest.mark.slow]

from diagnostic_msgs.msg import DiagnosticArray  # noqa: E402
from rclpy.executors import SingleThreadedExecutor  # noqa: E402
from rclpy.parameter import Parameter  # noqa: E402
from std_msgs.msg import Float64MultiArray  # noqa: E402
from xinfer_ros.msg import ActionChunk, PolicyRequest  # noqa: E402

from xinfer_ros.nodes.robot_sim import RobotSim  # noqa: E402
from xinfer_ros.nodes.rtc_executor import RtcExecutor  # noqa: E402

from .test_processes import start, wait_for_line  # noqa: E402

STALL_S = 3.0


@pytest.mark.timeout(180)
def test_first_ok_chunk_after_a_3s_server_stall(tmp_path) -> None:
    rclpy.init()
    executor = RtcExecutor(namespace="rr1", parameter_overrides=[
        Parameter("max_velocity", value=[20.0]),
        Parameter("min_position", value=[-10.0]), Parameter("max_position", value=[10.0])])
    robot = RobotSim(namespace="rr1", parameter_overrides=[
        Parameter("camera_rate_hz", value=10.0)])
    watcher = rclpy.create_node("watcher", namespace="rr1")
    chunks: list[tuple[float, ActionChunk]] = []
    commands: list[list[float]] = []
    watcher.create_subscription(ActionChunk, "action_chunk",
                                lambda m: chunks.append((time.monotonic(), m)), 10)
    watcher.create_subscription(Float64MultiArray, "commands",
                                lambda m: commands.append(list(m.data)), 10)
    spinner = SingleThreadedExecutor()
    for node in (executor, robot, watcher):
        spinner.add_node(node)
    counters = executor.queue.counters

    def spin_until(cond, timeout: float) -> bool:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            spinner.spin_once(timeout_sec=0.01)
            if cond():
                return True
        return False

    server = start("xinfer_ros.nodes.inference_server", "/",
                   {"robots": ["rr1"], "backend": "emulated"}, tmp_path)
    try:
        wait_for_line(server, "serving 1 robots", 60)
        assert spin_until(lambda: counters.chunks_applied >= 10, 30)
        service = [c.timing.server_total_ms / 1e3 for _, c in chunks
                   if c.status == ActionChunk.STATUS_OK and c.timing.server_total_ms > 0]
        service_s = float(np.median(service)) if service else 0.0
        server.send_signal(signal.SIGSTOP)
        spin_until(lambda: False, STALL_S)
        resumed = time.monotonic()
        server.send_signal(signal.SIGCONT)
        assert spin_until(lambda: any(t > resumed and c.status == ActionChunk.STATUS_OK
                                      for t, c in chunks), 10)
        first_ok = min(t for t, c in chunks if t > resumed and c.status == ActionChunk.STATUS_OK)
        after = [c for t, c in chunks if t > resumed and t <= first_ok]
        recovery = first_ok - resumed
        print(f"\nstall {STALL_S:g} s: first OK chunk {recovery * 1e3:.0f} ms after SIGCONT "
              f"(service time {service_s * 1e3:.0f} ms; {len(after) - 1} non-OK answers "
              f"before it: {[c.reason[:60] for c in after[:-1]]})")
        assert recovery < 0.5 + service_s
        # Commands stayed finite, within limits, and never dropped to zero.
        spin_until(lambda: False, 1.0)  # and once commanding resumed
        sent = np.array(commands)
        assert len(sent) and np.all(np.isfinite(sent)) and np.all(np.abs(sent) <= 10.0)
        assert not np.any(np.all(sent == 0.0, axis=1))
    finally:
        if server.poll() is None:
            server.send_signal(signal.SIGCONT)
            server.send_signal(signal.SIGINT)
            server.wait(timeout=20)
        spinner.shutdown()
        for node in (executor, robot, watcher):
            node.destroy_node()
        rclpy.shutdown()


@pytest.mark.timeout(180)
def test_a_stranger_neither_drives_an_activated_robot_nor_goes_unseen(tmp_path) -> None:
    rclpy.init()
    executor = RtcExecutor(namespace="rf1", parameter_overrides=[
        Parameter("autostart", value=False), Parameter("stats_period_s", value=0.2),
        Parameter("min_position", value=[-10.0]), Parameter("max_position", value=[10.0])])
    robot = RobotSim(namespace="rf1", parameter_overrides=[
        Parameter("camera_rate_hz", value=10.0)])
    intruder = rclpy.create_node("intruder", namespace="elsewhere")
    forged_chunks = intruder.create_publisher(ActionChunk, "/rf1/action_chunk", 10)
    forged_requests = intruder.create_publisher(PolicyRequest, "/rf1/policy_request", 10)
    commands: list[list[float]] = []
    diagnostics: list[DiagnosticArray] = []
    intruder.create_subscription(Float64MultiArray, "/rf1/commands",
                                 lambda m: commands.append(list(m.data)), 10)
    intruder.create_subscription(DiagnosticArray, "/diagnostics", diagnostics.append, 10)

    def forge(req: PolicyRequest) -> None:
        # Answer every request of the executor first, with its seq: stamped in 1970, and
        # with valid stamps but actions of 1e6.
        if req.robot_id != "rf1" or not req.budget_ms or req.instruction == "forged":
            return
        for stamp_sec, value in ((0, 0.5), (req.header.stamp.sec, 1e6)):
            msg = ActionChunk(robot_id="rf1", seq=req.seq, status=ActionChunk.STATUS_OK,
                              horizon=50, action_dim=14, commit_steps=req.commit_steps)
            msg.actions = [value] * (50 * 14)
            msg.state_stamp.sec, msg.state_stamp.nanosec = stamp_sec, req.header.stamp.nanosec
            forged_chunks.publish(msg)

    intruder.create_subscription(PolicyRequest, "/rf1/policy_request", forge, 10)
    spinner = SingleThreadedExecutor()
    for node in (executor, robot, intruder):
        spinner.add_node(node)

    def spin(seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            spinner.spin_once(timeout_sec=0.01)

    server = start("xinfer_ros.nodes.inference_server", "/",
                   {"robots": ["rf1"], "backend": "emulated"}, tmp_path)
    try:
        wait_for_line(server, "serving 1 robots", 60)
        executor.trigger_configure()
        spin(1.0)
        assert commands == []  # inactive: nothing commanded
        executor.trigger_activate()
        spin(4.0)
        forged_requests.publish(PolicyRequest(robot_id="rf1", seq=10**6, budget_ms=400.0,
                                              instruction="forged"))
        spin(1.0)
        assert commands, "the activated executor never commanded"
        sent = np.array(commands)
        assert np.all(np.abs(sent) <= 10.0) and not np.any(sent == 0.5)
        drops = executor.core.drops
        assert sum(drops.values()) > 0 and executor.queue.counters.chunks_applied > 5
        seen = [s for d in diagnostics for s in d.status
                if s.name == "xinfer/executor/rf1/publishers"]
        assert seen and "/elsewhere/intruder" in seen[-1].message
        print(f"\nforged chunks dropped by reason: { {r.value: n for r, n in drops.items()} }")
    finally:
        if server.poll() is None:
            server.send_signal(signal.SIGINT)
            server.wait(timeout=20)
        spinner.shutdown()
        for node in (executor, robot, intruder):
            node.destroy_node()
        rclpy.shutdown()
