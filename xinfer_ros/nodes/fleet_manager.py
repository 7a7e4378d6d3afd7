"""The fleet manager node: which inference server serves which robot.

Every named inference server announces itself on ``xinfer/servers``
(:class:`~xinfer_ros.msg.ServerStatus`: capacity, allowlist, attainment) every
``heartbeat_period_s``. The manager keeps the robot -> server assignment
(:mod:`xinfer_ros.fleet.assignment`: within capacity, balanced, tight budgets spread,
sticky) and publishes it latched on ``xinfer/assignment``
(:class:`~xinfer_ros.msg.FleetAssignment`) at every change; each robot's RTC executor
sends its requests to its assigned server only.

A server unheard for ``server_timeout_s`` loses its robots to the others at once (the
executors resend to their new server without waiting for their request timeout); heard
again, it takes robots back after beating for ``rejoin_after_s``. A server that joins
takes only its share. Robots no server has room for are listed with
an empty server: their executors send nothing and say so, and so does this node on
``/diagnostics``. Each robot's mean budget (from its ``executor_stats``) decides where
a robot that has to move goes, never whether it moves.

A server name belongs to the node first heard with it while that node beats: a
heartbeat with the same ``server_name`` from another node (by its publisher) is ignored,
and both nodes are named on ``/diagnostics`` (ERROR) and in the log, so a second server
misconfigured with a taken name, or a fake one, cannot take robots.

The first assignment waits ``settle_s``, and until ``expected_servers`` are heard
(at most ``startup_timeout_s``), so that servers starting together share the robots
from the first request on. A restarted manager starts from what the servers report
serving, so robots do not move because the manager restarted.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping
from typing import Any

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from rclpy.node import Node

from xinfer_ros.fleet.assignment import ASSIGNMENT_TOPIC, SERVERS_TOPIC
from xinfer_ros.fleet.roster import (
    REJOIN_AFTER_S,
    SERVER_TIMEOUT_S,
    Change,
    Heartbeat,
    NameConflict,
    Roster,
)
from xinfer_ros.msg import ExecutorStats, FleetAssignment, ServerStatus
from xinfer_ros.nodes.lifetime import destroyed_on_failure
from xinfer_ros.nodes.params import ParamSpec, declare_params, robot_names
from xinfer_ros.nodes.qos import LATCHED_QOS

__all__ = ["ASSIGNMENT_TOPIC", "PARAMS", "SERVERS_TOPIC", "FleetManager", "main"]


PARAMS = [
    ParamSpec("robots", ["robot_1"], "the fleet's robot namespaces",
              check=lambda v: None if v else "is empty"),
    ParamSpec("server_timeout_s", SERVER_TIMEOUT_S, "a server unheard this long has failed "
              "and loses its robots (s; a few heartbeat periods)", 0.05, 60.0),
    ParamSpec("rejoin_after_s", REJOIN_AFTER_S, "a failed server heard again takes robots "
              "back after beating this long (s)", 0.0, 3600.0),
    ParamSpec("settle_s", 1.5, "wait at least this long for the servers' first heartbeats "
              "before the first assignment (s)", 0.0, 60.0),
    ParamSpec("expected_servers", 0, "then wait until this many servers are heard (models "
              "load at different speeds), at most startup_timeout_s (0: do not wait)",
              0, 10_000),
    ParamSpec("startup_timeout_s", 120.0, "longest wait for expected_servers (s)", 0.0,
              3600.0),
    ParamSpec("budget_window_s", 60.0, "time constant of each robot's mean budget, which "
              "places moving robots so that tight ones spread (s)", 1.0, 86_400.0),
]


class FleetManager(Node):
    """The fleet manager; see the module docstring."""

    @destroyed_on_failure
    def __init__(self, **kwargs: Any) -> None:
        super().__init__("fleet_manager", **kwargs)
        p = declare_params(self, PARAMS)
        robots = robot_names(p["robots"])
        self.roster = Roster(robots, server_timeout_s=p["server_timeout_s"],
                             budget_window_s=p["budget_window_s"],
                             rejoin_after_s=p["rejoin_after_s"])
        self._start = time.monotonic()
        self._settle = p["settle_s"]
        self._expected = p["expected_servers"]
        self._startup_timeout = max(p["startup_timeout_s"], self._settle)
        self._last: Change | None = None
        self._logged_conflicts: set[tuple[str, str]] = set()
        self._pub = self.create_publisher(FleetAssignment, ASSIGNMENT_TOPIC, LATCHED_QOS)
        self._diag = self.create_publisher(DiagnosticArray, "/diagnostics", 10)
        self.create_subscription(ServerStatus, SERVERS_TOPIC, self._on_status, 50)
        for robot in robots:
            self.create_subscription(ExecutorStats, f"{robot}/executor_stats",
                                     lambda m, r=robot: self._on_executor(r, m), 10)
        self.create_timer(0.05, self._update)
        self.create_timer(1.0, self._publish_diagnostics)
        self.get_logger().info(f"managing {len(robots)} robots; servers time out after "
                               f"{p['server_timeout_s']:g} s")

    def _on_status(self, msg: ServerStatus, info: Mapping[str, object] | None) -> None:
        if not msg.server_name:
            return
        source = _gid_hex((info or {}).get("publisher_gid"))
        accepted = self.roster.heard(Heartbeat(
            msg.server_name, time.monotonic(), int(msg.capacity), frozenset(msg.candidates),
            tuple(msg.serving), float(msg.attainment), bool(msg.accepting), source))
        if not accepted and (msg.server_name, source) not in self._logged_conflicts:
            self._logged_conflicts.add((msg.server_name, source))
            for conflict in self.roster.conflicts(time.monotonic()):
                if conflict.server == msg.server_name and conflict.claimant == source:
                    self.get_logger().error(self._conflict_text(conflict))

    def _node_of(self, source: str) -> str:
        """The node that publishes heartbeats with gid ``source`` (the gid if gone)."""
        for info in self.get_publishers_info_by_topic(SERVERS_TOPIC):
            if bytes(info.endpoint_gid).hex() == source:
                namespace = info.node_namespace.rstrip("/")
                return f"{namespace}/{info.node_name}"
        return f"publisher {source}"

    def _conflict_text(self, conflict: NameConflict) -> str:
        return (f"two nodes claim server name {conflict.server!r}: "
                f"{self._node_of(conflict.holder)} (heard first, keeps it) and "
                f"{self._node_of(conflict.claimant)} (ignored until the first falls "
                "silent); give each server its own server_name")

    def _on_executor(self, robot: str, msg: ExecutorStats) -> None:
        self.roster.budget(robot, msg.budget_ms / 1e3, time.monotonic())

    def _update(self) -> None:
        now = time.monotonic()
        waited = now - self._start
        if self._last is None and (waited < self._settle or (
                len(self.roster.live(now)) < self._expected
                and waited < self._startup_timeout)):
            return
        change = self.roster.update(now)
        if change is None:
            return
        self._last = change
        msg = FleetAssignment(epoch=change.epoch, robots=list(change.assignment),
                              servers=[s or "" for s in change.assignment.values()],
                              live_servers=[o.name for o in change.offers],
                              capacities=[o.capacity for o in change.offers],
                              reason=change.reason)
        msg.header.stamp = self.get_clock().now().to_msg()
        self._pub.publish(msg)
        text = (f"assignment {change.epoch}: {change.reason}; robots per server "
                f"{change.robots_per_server()}; "
                f"moved {change.moved or 'none'}"
                + (f"; NO SERVER for {change.unassigned}" if change.unassigned else ""))
        # rclpy fixes each call site's severity: one site per level.
        if change.unassigned or self.roster.lost:
            self.get_logger().warning(text)
        else:
            self.get_logger().info(text)

    def _publish_diagnostics(self) -> None:
        diag = DiagnosticArray()
        diag.header.stamp = self.get_clock().now().to_msg()
        change = self._last
        if change is None:
            diag.status.append(DiagnosticStatus(
                level=DiagnosticStatus.WARN, name="xinfer/fleet_manager",
                message="waiting for servers' heartbeats", hardware_id=self.get_name()))
            diag.status += self._conflict_statuses()
            self._diag.publish(diag)
            return
        capacity = [o.capacity for o in change.offers]
        total = "unstated" if not capacity or 0 in capacity else str(sum(capacity))
        level = DiagnosticStatus.OK
        text = f"{len(change.assignment)} robots on {len(change.offers)} servers"
        if not change.offers:
            level, text = DiagnosticStatus.ERROR, "no live server"
        elif change.unassigned:
            level = DiagnosticStatus.WARN
            text = (f"{len(change.unassigned)} robots have no server: the live servers' "
                    f"capacity ({total}) or allowlists leave them out")
        values = [KeyValue(key="epoch", value=str(change.epoch)),
                  KeyValue(key="capacity", value=total),
                  KeyValue(key="lost_servers", value=",".join(sorted(self.roster.lost)))]
        values += [KeyValue(key=f"server/{name}", value=str(count))
                   for name, count in change.robots_per_server().items()]
        diag.status.append(DiagnosticStatus(level=level, name="xinfer/fleet_manager",
                                            message=text, hardware_id=self.get_name(),
                                            values=values))
        diag.status += self._conflict_statuses()
        for robot in change.unassigned:
            diag.status.append(DiagnosticStatus(
                level=DiagnosticStatus.WARN, name=f"xinfer/fleet_manager/robots/{robot}",
                hardware_id=robot, message=f"not served: no live server has room for it "
                f"(capacity {total}) or may serve it"))
        self._diag.publish(diag)


    def _conflict_statuses(self) -> list[DiagnosticStatus]:
        """An ERROR per server name two nodes claim, naming both."""
        return [DiagnosticStatus(
            level=DiagnosticStatus.ERROR, name=f"xinfer/fleet_manager/servers/{c.server}",
            hardware_id=c.server, message=self._conflict_text(c),
            values=[KeyValue(key="holder", value=self._node_of(c.holder)),
                    KeyValue(key="claimant", value=self._node_of(c.claimant))])
            for c in self.roster.conflicts(time.monotonic())]


def _gid_hex(gid: object) -> str:
    """A publisher gid (rclpy's MessageInfo) as hex; "" when the middleware gives none."""
    data = gid.get("data") if isinstance(gid, dict) else None
    return bytes(data).hex() if data else ""


def main(argv: list[str] | None = None) -> int:
    """Run the manager until SIGINT; return the exit status."""
    from xinfer_ros.nodes.runtime import spin_node

    return spin_node(FleetManager, argv)


if __name__ == "__main__":
    sys.exit(main())
