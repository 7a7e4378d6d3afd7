"""The report of an ``xinfer-fleet`` run, typed until it is written as JSON.

Each part's ``to_dict`` gives the keys, order and values of the report file
(``fleet_report.json``) that :mod:`xinfer_ros.cli.fleet` writes; the runner builds the
parts from what the fleet monitor saw and prints its table from them. ROS-free.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Protocol

from xinfer_ros.core.metrics import WindowMetrics
from xinfer_ros.engine.speed_probe import SpeedSummary
from xinfer_ros.fleet.failover import Failover

__all__ = [
    "FLEET_BENCHMARK",
    "ExecutorFigures",
    "ExecutorStatsFields",
    "FailoverReport",
    "FleetReport",
    "FleetTotal",
    "RobotReport",
    "SendLag",
    "ServerReport",
    "SimComparison",
]

#: A JSON object as the report writes it.
JsonDict = dict[str, object]

#: The report's ``benchmark`` key, beside ``xinfer-bench engine``'s "engine": what
#: ``xinfer-bench compare`` reads it as.
FLEET_BENCHMARK = "fleet"


class ExecutorStatsFields(Protocol):
    """The counters of an executor's ``ExecutorStats`` message the report takes."""

    starved_ticks: int
    ticks: int
    handoff_violations: int
    trigger_misses: int
    request_timeouts: int
    requests_sent: int
    chunks_applied: int
    non_ok_chunks: int
    switch_step_max: list[float]
    within_step_max: list[float]
    send_lag_mean_ms: float
    send_lag_p95_ms: float
    send_lag_max_ms: float


@dataclass(frozen=True)
class ExecutorFigures:
    """What one robot's RTC executor reported about itself (cumulative since start)."""

    # Control ticks without an action to execute.
    starved_ticks: int
    # Control ticks run.
    ticks: int
    # Chunks switched to later than the hand-off allows.
    handoff_violations: int
    # Eq. 1 sends that missed their trigger.
    trigger_misses: int
    # Requests abandoned unanswered.
    request_timeouts: int
    # Requests sent.
    requests_sent: int
    # Chunks spliced into the command stream.
    chunks_applied: int
    # Chunks refused (shed, rejected, error).
    non_ok_chunks: int
    # RTC at work: the largest command step at a chunk switch and within a chunk
    # (robot units), over the joints.
    switch_step_max: float
    within_step_max: float
    # How late its Eq. 1 sends went out (ms): mean, P95, max.
    send_lag_mean_ms: float
    send_lag_p95_ms: float
    send_lag_max_ms: float

    @classmethod
    def of(cls, ex: ExecutorStatsFields) -> ExecutorFigures:
        """The figures of an ``ExecutorStats`` message, as plain numbers."""
        return cls(
            starved_ticks=int(ex.starved_ticks), ticks=int(ex.ticks),
            handoff_violations=int(ex.handoff_violations),
            trigger_misses=int(ex.trigger_misses), request_timeouts=int(ex.request_timeouts),
            requests_sent=int(ex.requests_sent), chunks_applied=int(ex.chunks_applied),
            non_ok_chunks=int(ex.non_ok_chunks),
            # The worst joint of each.
            switch_step_max=max(ex.switch_step_max, default=0.0),
            within_step_max=max(ex.within_step_max, default=0.0),
            send_lag_mean_ms=float(ex.send_lag_mean_ms),
            send_lag_p95_ms=float(ex.send_lag_p95_ms), send_lag_max_ms=float(ex.send_lag_max_ms))


#: The executor keys of a robot whose executor never reported: all ``None``.
_NO_EXECUTOR: JsonDict = {name: None for name in ExecutorFigures.__dataclass_fields__}


@dataclass(frozen=True)
class RobotReport:
    """One robot's figures: what the monitor measured and what its executor said."""

    # Its requests in the window, as the monitor saw them.
    metrics: WindowMetrics
    # Answers by status name (all of them, not only the window's).
    statuses: dict[str, int]
    # Every chunk the robot received, by the server that sent it.
    chunks_by_server: dict[str, int]
    # None: its executor never reported.
    executor: ExecutorFigures | None

    def to_dict(self) -> JsonDict:
        """The report's entry of the robot.

        The executor's ``handoff_violations`` replaces the monitor's count of the same
        name, as the report always had it.
        """
        out = self.metrics.to_dict()
        out.update({"statuses": dict(self.statuses),
                    "chunks_by_server": dict(self.chunks_by_server),
                    **(_NO_EXECUTOR if self.executor is None else asdict(self.executor))})
        return out


@dataclass(frozen=True)
class SendLag:
    """The fleet's send lag behind Eq. 1 (ms; all ``None`` when no executor reported)."""

    # Request-weighted mean of the robots' means.
    send_lag_mean_ms: float | None = None
    # The largest robot P95.
    send_lag_p95_ms: float | None = None
    # The largest lag of any robot.
    send_lag_max_ms: float | None = None


@dataclass(frozen=True)
class FleetTotal:
    """All robots together."""

    # Every robot's requests in the window.
    metrics: WindowMetrics
    # Answers by status name, summed over the robots.
    statuses: dict[str, int]
    send_lag: SendLag

    def to_dict(self) -> JsonDict:
        """The report's ``total`` entry."""
        return {**self.metrics.to_dict(), "statuses": dict(self.statuses),
                **asdict(self.send_lag)}


@dataclass(frozen=True)
class ServerReport:
    """One server's figures: the requests addressed to it."""

    # The robots that addressed at least one request to it.
    robots: list[str]
    metrics: WindowMetrics

    def to_dict(self) -> JsonDict:
        """The report's entry of the server."""
        return {"robots": list(self.robots), **self.metrics.to_dict()}


@dataclass(frozen=True)
class SimComparison:
    """The closed-loop simulator's run of the same fleet."""

    # The simulator's settings (SimConfig fields), as given to it.
    config: JsonDict
    # The server's phase_spread setting, which the simulator followed.
    phase_spread: bool
    metrics: WindowMetrics

    def to_dict(self) -> JsonDict:
        """The report's ``simulator`` entry."""
        return {"config": dict(self.config), "phase_spread": self.phase_spread,
                "metrics": self.metrics.to_dict()}


@dataclass(frozen=True)
class FailoverReport:
    """How the fleet came through the failure of its last server."""

    failover: Failover
    # When a hung server woke up (s; None: it was killed, or never woke).
    resumed_at_s: float | None
    # Robots it took back once heard again: how long each went without an OK chunk (s).
    takeover_gap_s: dict[str, float] | None
    # Chunks the executors dropped as coming from a server they had left.
    foreign_chunks: int
    # Chunks the monitor saw arrive from such a server (the two see requests and chunks
    # in their own orders, so they may differ by a chunk that crossed a switch).
    left_server_chunks_seen: int

    def to_dict(self) -> JsonDict:
        """The report's ``failover`` entry."""
        out = self.failover.to_dict()
        if self.resumed_at_s is not None:
            out["resumed_at_s"] = self.resumed_at_s
            out["takeover_gap_s"] = dict(self.takeover_gap_s or {})
        out["foreign_chunks"] = self.foreign_chunks
        out["left_server_chunks_seen"] = self.left_server_chunks_seen
        return out


@dataclass
class FleetReport:
    """The report of one fleet run."""

    # The server's settings.
    policy: str
    backend: str
    model: str
    phase_spread: bool
    # The simulated robots' budget pattern.
    workload: str
    # Factor on the workload's budgets, and why.
    budget_scale: float
    budget_scale_reason: str
    # The run's length once the server answered (s).
    duration_s: float
    # When the server first answered (s after the start); the run is timed from then.
    server_ready_s: float
    # Requests sent in [start, end) s were measured.
    window_s: tuple[float, float]
    robots: dict[str, RobotReport]
    total: FleetTotal
    # Nodes that exited early.
    failed_nodes: list[str]
    servers: dict[str, ServerReport]
    # With --compare-sim.
    simulator: SimComparison | None = None
    # With --fail-server-at.
    failover: FailoverReport | None = None
    # With --arm: the arm xinfer-bench compare groups this run under.
    arm: str | None = None
    # How fast the host's cores ran over the measured window (None: no probe, or no
    # sample in the window).
    speed_probe: SpeedSummary | None = None

    @property
    def emulated(self) -> bool:
        """Whether the server ran the emulated backend."""
        return self.backend == "emulated"

    def to_dict(self) -> JsonDict:
        """The JSON report, keys in the order the runner always wrote them."""
        out: JsonDict = {
            "robots_count": len(self.robots), "policy": self.policy, "backend": self.backend,
            "model": self.model, "workload": self.workload, "phase_spread": self.phase_spread,
            "budget_scale": self.budget_scale, "budget_scale_reason": self.budget_scale_reason,
            "duration_s": self.duration_s, "server_ready_s": self.server_ready_s,
            "window_s": list(self.window_s), "emulated": self.emulated,
            "robots": {name: r.to_dict() for name, r in self.robots.items()},
            "total": self.total.to_dict(), "failed_nodes": list(self.failed_nodes),
            "servers": {name: s.to_dict() for name, s in self.servers.items()},
        }
        if self.simulator is not None:
            out["simulator"] = self.simulator.to_dict()
        if self.failover is not None:
            out["failover"] = self.failover.to_dict()
        out["benchmark"] = FLEET_BENCHMARK
        if self.arm is not None:
            out["arm"] = self.arm
        if self.speed_probe is not None:
            out["speed_probe"] = self.speed_probe.to_dict()
        return out
