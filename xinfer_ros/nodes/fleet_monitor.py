"""Observes a running fleet from outside: requests, chunks and executor counters.

The monitor subscribes to every robot's ``policy_request``, ``action_chunk`` and
``executor_stats``. A request's latency is the chunk's arrival at the monitor minus
the request's send stamp (the executor's clock; one machine, one clock), the same span
the paper measures: client send to complete response.

With several servers it also notes which server each request was addressed to and
each chunk came from (``served_by``, ``answers``), for per-server figures and failover.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import rclpy
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node

from xinfer_ros.core.metrics import ResponseRecord
from xinfer_ros.core.timing import MS_PER_S
from xinfer_ros.msg import ActionChunk, ExecutorStats, FleetStats, PolicyRequest
from xinfer_ros.nodes.lifetime import destroyed_on_failure

__all__ = ["FleetMonitor", "RobotObservation", "watching"]

STATUS_NAMES = {ActionChunk.STATUS_OK: "ok", ActionChunk.STATUS_REJECTED: "rejected",
                ActionChunk.STATUS_SHED: "shed", ActionChunk.STATUS_ERROR: "error"}


@dataclass
class RobotObservation:
    """What the monitor saw of one robot."""

    index: int
    # seq -> send time, budget, server addressed
    pending: dict[int, tuple[float, float, str]] = field(default_factory=dict)
    records: list[ResponseRecord] = field(default_factory=list)
    #: The server each record's request was addressed to ("": any), parallel to records.
    served_by: list[str] = field(default_factory=list)
    #: Every chunk: receipt time, the server that sent it, whether it was OK.
    answers: list[tuple[float, str, bool]] = field(default_factory=list)
    statuses: Counter[str] = field(default_factory=Counter)
    executor: ExecutorStats | None = None
    #: The server the robot's latest request was addressed to.
    addressed: str = ""
    #: Chunks from a server other than that one: late answers of a server it left.
    left_server_chunks: int = 0


class FleetMonitor(Node):
    """Collects per-robot response records while the fleet runs.

    Args:
        robots: Robot namespaces to watch.
        t0: Wall-clock origin (``time.time()``) for record times.
    """

    @destroyed_on_failure
    def __init__(self, robots: list[str], t0: float) -> None:
        super().__init__("xinfer_fleet_monitor")
        self.t0 = t0
        self.robots = {name: RobotObservation(i) for i, name in enumerate(robots)}
        self.fleet_stats: FleetStats | None = None
        #: Seconds after ``t0`` of the first chunk of any status: the server is serving.
        self.first_answer: float | None = None
        self._lock = threading.Lock()
        for name in robots:
            self.create_subscription(PolicyRequest, f"/{name}/policy_request",
                                     lambda m, n=name: self._on_request(n, m), 50)
            self.create_subscription(ActionChunk, f"/{name}/action_chunk",
                                     lambda m, n=name: self._on_chunk(n, m), 50)
            self.create_subscription(ExecutorStats, f"/{name}/executor_stats",
                                     lambda m, n=name: self._on_executor(n, m), 10)
        self.create_subscription(FleetStats, "/xinfer/fleet_stats", self._on_fleet, 10)

    def _on_request(self, robot: str, msg: PolicyRequest) -> None:
        sent = msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9 - self.t0
        with self._lock:
            obs = self.robots[robot]
            if msg.server:
                # A request to another server: the robot switched and abandoned those in
                # flight to the one it left. They count as unanswered; their late answers
                # are not the robot's responses.
                for seq, (at, budget, to) in list(obs.pending.items()):
                    if to and to != msg.server:
                        del obs.pending[seq]
                        obs.records.append(ResponseRecord(at, None, budget, ok=False,
                                                          robot=obs.index))
                        obs.served_by.append(to)
            obs.pending[msg.seq] = (sent, msg.budget_ms / MS_PER_S, msg.server)
            obs.addressed = msg.server

    def _on_chunk(self, robot: str, msg: ActionChunk) -> None:
        now = time.time() - self.t0
        with self._lock:
            if self.first_answer is None:
                self.first_answer = now
            obs = self.robots[robot]
            ok = msg.status == ActionChunk.STATUS_OK
            obs.statuses[STATUS_NAMES.get(msg.status, str(msg.status))] += 1
            obs.answers.append((now, msg.server, ok))
            obs.left_server_chunks += bool(obs.addressed) and msg.server != obs.addressed
            sent = obs.pending.pop(msg.seq, None)
            if sent is not None:
                obs.records.append(ResponseRecord(
                    send_time=sent[0], response_time=now, budget=sent[1], ok=ok,
                    robot=obs.index))
                obs.served_by.append(sent[2])

    def _on_executor(self, robot: str, msg: ExecutorStats) -> None:
        with self._lock:
            self.robots[robot].executor = msg

    def _on_fleet(self, msg: FleetStats) -> None:
        self.fleet_stats = msg

    def in_flight_to(self, server: str, within_s: float = 0.1) -> int:
        """Requests addressed to ``server``, sent in the last ``within_s`` and unanswered."""
        now = time.time() - self.t0
        with self._lock:
            return sum(1 for obs in self.robots.values() for sent, _, to in obs.pending.values()
                       if to == server and now - sent <= within_s)

    def snapshot(self, include_pending: bool = False) -> dict[str, RobotObservation]:
        """A consistent copy; unanswered requests become records with no response."""
        with self._lock:
            out = {}
            for name, obs in self.robots.items():
                records, served_by = list(obs.records), list(obs.served_by)
                if include_pending:
                    records += [ResponseRecord(s, None, b, ok=False, robot=obs.index)
                                for s, b, _ in obs.pending.values()]
                    served_by += [server for _, _, server in obs.pending.values()]
                out[name] = RobotObservation(obs.index, dict(obs.pending), records, served_by,
                                             list(obs.answers), Counter(obs.statuses),
                                             obs.executor, obs.addressed,
                                             obs.left_server_chunks)
            return out


@contextmanager
def watching(robots: list[str], t0: float) -> Iterator[FleetMonitor]:
    """A :class:`FleetMonitor` spinning on its own thread for the ``with`` block.

    Initialises rclpy and shuts it down afterwards; the monitor's data (``snapshot``)
    stays readable after the block.
    """
    rclpy.init()
    monitor = FleetMonitor(robots, t0)
    spinner = SingleThreadedExecutor()
    spinner.add_node(monitor)
    threading.Thread(target=spinner.spin, daemon=True, name="fleet-monitor").start()
    try:
        yield monitor
    finally:
        spinner.shutdown()
        monitor.destroy_node()
        rclpy.try_shutdown()
