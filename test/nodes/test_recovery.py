"""Recovery after a server stall: SIGSTOP the server, SIGCONT, time the first OK chunk.

Run with ``-s`` to see the figure (docs/BENCHMARKS.md quotes it)::

    python -m pytest test/nodes/test_recovery.py -s -m slow
"""

import signal
import time

import numpy as np
import pytest

rclpy = pytest.importorskip("rclpy")
pytestmark = [pytest.mark.ros, pytest.mark.slow]

from rclpy.executors import SingleThreadedExecutor  # noqa: E402
from rclpy.parameter import Parameter  # noqa: E402
from std_msgs.msg import Float64MultiArray  # noqa: E402
from xinfer_ros.msg import ActionChunk  # noqa: E402

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
