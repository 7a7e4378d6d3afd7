"""A real server and executors: recovery after a stall, and a stranger on the topics.

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

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus  # noqa: E402
from rclpy.executors import SingleThreadedExecutor  # noqa: E402
from rclpy.parameter import Parameter  # noqa: E402
from std_msgs.msg import Float64MultiArray  # noqa: E402
from xinfer_ros.msg import ActionChunk, PolicyRequest  # noqa: E402
from xinfer_ros.srv import GetFleetStats  # noqa: E402

from xinfer_ros.nodes.robot_sim import RobotSim  # noqa: E402
from xinfer_ros.nodes.rtc_executor import RtcExecutor  # noqa: E402

from ..service_calls import ask, configure_and_activate  # noqa: E402
from .test_processes import spin_executor_until, start, wait_for_line  # noqa: E402

STALL_S = 3.0


@pytest.mark.timeout(180)
@pytest.mark.xfail(strict=False, reason=(
    "transport, open: in about 1 run of 10 one camera topic delivers no frame to the "
    "server for seconds after the stall (over Fast DDS shared memory: for good, even to a "
    "fresh subscription, as with eProsima/Fast-DDS#5469; over UDP: 1-3 s), while its "
    "requests and joint states arrive; the recovery figure holds in the other runs"))
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
        return spin_executor_until(spinner, cond, timeout)

    # The default transport, as a user runs it (see the xfail for what it does at times).
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
        recovered = spin_until(lambda: any(t > resumed and c.status == ActionChunk.STATUS_OK
                                           for t, c in chunks), 10)
        assert recovered, (
            f"no OK chunk 10 s after SIGCONT; answers: "
            f"{sorted({c.reason[:70] for t, c in chunks if t > resumed})}; server log tail: "
            f"{''.join(server.lines[-15:])}")
        first_ok = min(t for t, c in chunks if t > resumed and c.status == ActionChunk.STATUS_OK)
        after = [c for t, c in chunks if t > resumed and t <= first_ok]
        recovery = first_ok - resumed
        print(f"\nstall {STALL_S:g} s: first OK chunk {recovery * 1e3:.0f} ms after SIGCONT "
              f"(service time {service_s * 1e3:.0f} ms; {len(after) - 1} non-OK answers "
              f"before it: {[c.reason[:60] for c in after[:-1]]})")
        assert recovery < 0.5 + service_s, ''.join(
            line for line in server.lines if "WARN" in line)
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


class _Forger:
    """A second node that forges chunks for rf1's requests and, once ``forging``, 10 Hz of
    requests under rf1's name; it records rf1's commands."""

    def __init__(self) -> None:
        self.node = rclpy.create_node("intruder", namespace="elsewhere")
        self.chunks = self.node.create_publisher(ActionChunk, "/rf1/action_chunk", 10)
        self.requests = self.node.create_publisher(PolicyRequest, "/rf1/policy_request", 10)
        self.commands: list[list[float]] = []
        self.node.create_subscription(Float64MultiArray, "/rf1/commands",
                                      lambda m: self.commands.append(list(m.data)), 10)
        self.node.create_subscription(PolicyRequest, "/rf1/policy_request", self.forge, 10)
        self.node.create_timer(0.1, self.forge_request)
        self.forging = False
        self.seq = 10**6

    def forge(self, req: PolicyRequest) -> None:
        """Answer each request of the executor first, with its seq: stamped in 1970, and
        with valid stamps but actions of 1e6."""
        if req.robot_id != "rf1" or not req.budget_ms or req.instruction == "forged":
            return
        for stamp_sec, value in ((0, 0.5), (req.header.stamp.sec, 1e6)):
            msg = ActionChunk(robot_id="rf1", seq=req.seq, status=ActionChunk.STATUS_OK,
                              horizon=50, action_dim=14, commit_steps=req.commit_steps)
            msg.actions = [value] * (50 * 14)
            msg.state_stamp.sec, msg.state_stamp.nanosec = stamp_sec, req.header.stamp.nanosec
            self.chunks.publish(msg)

    def forge_request(self) -> None:
        """A newer request under rf1's name: before the server kept one session per
        robot, each superseded rf1's own request in the engine (SHED)."""
        if not self.forging:
            return
        self.seq += 1
        msg = PolicyRequest(robot_id="rf1", seq=self.seq, budget_ms=400.0, commit_steps=5,
                            keyframe_spacing_s=0.02, instruction="forged")
        msg.header.stamp = self.node.get_clock().now().to_msg()
        self.requests.publish(msg)


def _attainment(spinner, node, window_s: float) -> dict[str, float]:
    """Per robot, the server's attainment over the last ``window_s`` (get_fleet_stats)."""
    client = node.create_client(GetFleetStats, "/inference_server/get_fleet_stats")
    answer = ask(client, GetFleetStats.Request(window_s=window_s), _waiter(spinner))
    return {r.robot_id: r.attainment for r in answer.stats.robots}


def _waiter(spinner):
    """The ``service_calls.Wait`` of ``spinner``."""
    return lambda future, seconds: spin_executor_until(spinner, future.done, seconds)


@pytest.mark.timeout(240)
def test_a_stranger_neither_drives_an_activated_robot_nor_takes_its_service(tmp_path) -> None:
    """rf1 gets forged chunks and 10 Hz of forged requests; rf2, beside it, none.

    Server and executors start with autostart false and are activated over lifecycle.
    """
    rclpy.init()
    limits = [Parameter("autostart", value=False), Parameter("stats_period_s", value=0.2),
              Parameter("min_position", value=[-10.0]), Parameter("max_position", value=[10.0])]
    executors = [RtcExecutor(namespace=r, parameter_overrides=limits) for r in ("rf1", "rf2")]
    robots = [RobotSim(namespace=r, parameter_overrides=[
        Parameter("camera_rate_hz", value=10.0)]) for r in ("rf1", "rf2")]
    executor = executors[0]
    forger = _Forger()
    intruder, commands, operator = forger.node, forger.commands, rclpy.create_node("operator")
    diagnostics: list[DiagnosticArray] = []
    operator.create_subscription(DiagnosticArray, "/diagnostics", diagnostics.append, 50)
    spinner = SingleThreadedExecutor()
    for node in (*executors, *robots, intruder, operator):
        spinner.add_node(node)

    def spin(seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            spinner.spin_once(timeout_sec=0.01)

    server = start("xinfer_ros.nodes.inference_server", "/",
                   {"robots": ["rf1", "rf2"], "backend": "emulated", "autostart": False},
                   tmp_path)
    try:
        wait_for_line(server, "unconfigured", 60)
        for node in executors:
            node.trigger_configure()
        spin(1.0)
        assert commands == []  # inactive: nothing commanded
        configure_and_activate(operator, "/inference_server", _waiter(spinner))
        for node in executors:
            node.trigger_activate()
        spin(3.0)
        forger.forging = True
        started = time.monotonic()
        spin(7.0)  # the server's graph check runs every 5 s
        attainment = _attainment(spinner, operator, time.monotonic() - started)
        assert forger.seq > 10**6 + 50  # the forger ran at 10 Hz throughout
        assert commands, "the activated executor never commanded"
        sent = np.array(commands)
        assert np.all(np.abs(sent) <= 10.0) and not np.any(sent == 0.5)
        drops = executor.core.drops
        assert sum(drops.values()) > 0 and executor.queue.counters.chunks_applied > 5
        # The executor and the server name the stranger.
        for name in ("xinfer/executor/rf1/publishers", "xinfer/robots/rf1/publishers"):
            seen = [s for d in diagnostics for s in d.status if s.name == name]
            assert seen and seen[-1].level == DiagnosticStatus.WARN, name
            assert "/elsewhere/intruder" in seen[-1].message, seen[-1].message
        print(f"\nattainment with a forger {attainment['rf1']:.3f}, beside it without "
              f"{attainment['rf2']:.3f}; forged chunks dropped by reason: "
              f"{ {r.value: n for r, n in drops.items()} }")
        assert abs(attainment["rf1"] - attainment["rf2"]) <= 0.05
    finally:
        if server.poll() is None:
            server.send_signal(signal.SIGINT)
            server.wait(timeout=20)
        spinner.shutdown()
        for node in (*executors, *robots, intruder, operator):
            node.destroy_node()
        rclpy.shutdown()
