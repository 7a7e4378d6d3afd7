"""The fleet manager node against stand-in server heartbeats, in process."""

import time

import pytest

rclpy = pytest.importorskip("rclpy")
pytestmark = pytest.mark.ros

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus  # noqa: E402
from rclpy.executors import SingleThreadedExecutor  # noqa: E402
from rclpy.parameter import Parameter  # noqa: E402
from xinfer_ros.msg import FleetAssignment, ServerStatus  # noqa: E402

from xinfer_ros.nodes.fleet_manager import FleetManager  # noqa: E402
from xinfer_ros.nodes.qos import LATCHED_QOS  # noqa: E402

ROBOTS = ["r1", "r2", "r3", "r4", "r5"]


class Site:
    """A manager, and a peer that beats for stand-in servers and reads the assignment."""

    def __init__(self, **params: object) -> None:
        rclpy.init()
        values = {"robots": ROBOTS, "server_timeout_s": 0.4, "settle_s": 0.3, **params}
        self.manager = FleetManager(parameter_overrides=[
            Parameter(k, value=v) for k, v in values.items()])
        self.peer = rclpy.create_node("servers")
        self.beat_pub = self.peer.create_publisher(ServerStatus, "/xinfer/servers", 10)
        self.assignments: list[FleetAssignment] = []
        self.diagnostics: list[DiagnosticArray] = []
        self.peer.create_subscription(FleetAssignment, "/xinfer/assignment",
                                      self.assignments.append, LATCHED_QOS)
        self.peer.create_subscription(DiagnosticArray, "/diagnostics", self.diagnostics.append,
                                      10)
        self.spinner = SingleThreadedExecutor()
        self.spinner.add_node(self.manager)
        self.spinner.add_node(self.peer)

    def run(self, seconds: float, beating: dict[str, int]) -> None:
        """Spin, with the servers of ``beating`` (name -> capacity) beating every 0.1 s."""
        end = time.monotonic() + seconds
        last = 0.0
        while time.monotonic() < end:
            if time.monotonic() - last >= 0.1:
                last = time.monotonic()
                self.last_beat = time.time()
                for name, capacity in beating.items():
                    self.beat_pub.publish(ServerStatus(
                        server_name=name, capacity=capacity, candidates=ROBOTS,
                        accepting=True, attainment=float("nan")))
            self.spinner.spin_once(timeout_sec=0.01)

    def current(self) -> dict[str, str]:
        msg = self.assignments[-1]
        return dict(zip(msg.robots, msg.servers, strict=True))

    def close(self) -> None:
        self.spinner.shutdown()
        self.manager.destroy_node()
        self.peer.destroy_node()
        rclpy.shutdown()


@pytest.fixture
def site():
    s = Site(expected_servers=2)
    yield s
    s.close()


@pytest.mark.timeout(30)
def test_assignment_waits_for_the_expected_servers_then_fails_over(site: Site) -> None:
    site.run(0.8, {"a": 0})
    assert site.assignments == []  # b is expected and not heard yet
    site.run(0.5, {"a": 0, "b": 0})
    first = site.current()
    assert sorted(first.values()).count("a") in (2, 3) and set(first.values()) == {"a", "b"}
    assert site.assignments[-1].epoch == 1 and list(site.assignments[-1].live_servers) == ["a", "b"]
    b_robots = {r for r, s in first.items() if s == "b"}
    b_last = site.last_beat
    site.run(1.0, {"a": 0})  # b falls silent
    after = site.current()
    assert set(after.values()) == {"a"} and "b lost" in site.assignments[-1].reason
    moved = [r for r in ROBOTS if after[r] != first[r]]
    assert set(moved) == b_robots  # only b's robots moved
    # Published once b had been silent for server_timeout_s (0.4 s), not much later.
    stamp = site.assignments[-1].header.stamp
    assert 0.4 <= stamp.sec + stamp.nanosec * 1e-9 - b_last < 0.7


@pytest.mark.timeout(30)
def test_robots_beyond_the_total_capacity_are_unassigned_and_reported() -> None:
    site = Site()
    try:
        site.run(1.5, {"a": 2, "b": 1})
        current = site.current()
        assert sum(s == "" for s in current.values()) == 2
        assert sum(s == "a" for s in current.values()) == 2
        status = {s.name: s for d in site.diagnostics[-3:] for s in d.status}
        summary = status["xinfer/fleet_manager"]
        assert summary.level == DiagnosticStatus.WARN and "capacity (3)" in summary.message
        assert "2 robots have no server" in summary.message
        unserved = [r for r, s in current.items() if not s]
        assert all(f"xinfer/fleet_manager/robots/{r}" in status for r in unserved)
    finally:
        site.close()


@pytest.mark.timeout(30)
def test_a_second_node_claiming_a_taken_server_name_is_ignored_and_reported() -> None:
    site = Site()
    fake = rclpy.create_node("fake_server")
    fake_pub = fake.create_publisher(ServerStatus, "/xinfer/servers", 10)
    site.spinner.add_node(fake)
    try:
        site.run(1.0, {"a": 2, "b": 3})
        before = site.current()
        end = time.monotonic() + 1.5
        while time.monotonic() < end:         # "a" again, from another node, bigger
            fake_pub.publish(ServerStatus(server_name="a", capacity=5, candidates=ROBOTS,
                                          accepting=True, attainment=float("nan")))
            site.run(0.1, {"a": 2, "b": 3})
        assert site.current() == before       # the fake took nothing
        assert list(site.assignments[-1].capacities) == [2, 3]
        status = {s.name: s for d in site.diagnostics[-2:] for s in d.status}
        conflict = status["xinfer/fleet_manager/servers/a"]
        assert conflict.level == DiagnosticStatus.ERROR
        assert "/servers (heard first, keeps it)" in conflict.message
        assert "/fake_server (ignored" in conflict.message
        values = {kv.key: kv.value for kv in conflict.values}
        assert values == {"holder": "/servers", "claimant": "/fake_server"}
    finally:
        site.spinner.remove_node(fake)
        fake.destroy_node()
        site.close()
