"""Per-robot RTC executor node.

Keeps the robot moving on its current chunk: every keyframe tick (spacing Δ) it
publishes the next command on ``commands``. It sends the next ``policy_request`` at
``max(s_j + T_E, r_j)`` (Eq. 1) with the budget last received on ``budget``, the
aligned previous chunk and the commit length ``d``, and splices each returned
``action_chunk`` at the current execution index (:mod:`xinfer_ros.rtc.splice`).

Only the chunk answering the request in flight is accepted, so a chunk replayed after a
server restart is never applied. With several servers (``assignment_topic``: the fleet
manager's assignment) requests go to the assigned server only; when the assignment
changes the request in flight is abandoned and the new server gets one at once, and
chunks from any other server (a server left behind, answering late) are dropped and
counted (``foreign_chunks``). While no server is assigned nothing is sent. A request
unanswered for ``request_timeout_s`` is abandoned (the robot keeps holding) and the next
one goes out.

Safe start and loss of the server: nothing is published on ``commands`` before the
first chunk arrives (``startup: silent``), or the robot's measured joint positions
from ``joint_states`` are (``startup: hold_state``); never a default pose. When chunks
stop, the last command is held for at most ``hold_timeout_s`` after the queue ran dry;
then commands stop (the robot's controller holds) until a chunk arrives, and
``executor_stats.commanding`` and ``/diagnostics`` say so.

Output for ros2_control: ``commands`` (Float64MultiArray, one command per tick, for a
forward command controller) and/or ``joint_trajectory`` (trajectory_msgs/JointTrajectory
of the spliced chunk from the next tick on, keyframes Δ apart, published per applied
chunk, for ``joint_trajectory_controller``), chosen by ``output``.

The ``budget`` subscription matches both a latched (transient local) and a default
(volatile) publisher. A budget outside ``[min_budget_ms, max_budget_ms]`` (the
server's accepted range) is clamped into it, with a throttled warning, and counted.

``executor_stats`` also reports how late each Eq. 1 send goes out after its target
``max(s_j + T_E, r_j)`` (timer wake-up and executor latency;
:class:`xinfer_ros.rtc.send_lag.SendLagStats`). The first request and resends after a
timeout or a server's (re)appearance are not Eq. 1 sends and are not counted.
"""

from __future__ import annotations

import math
import sys
import time
from typing import Any

import numpy as np
from builtin_interfaces.msg import Duration
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from rclpy.duration import Duration as RosDuration
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy, qos_profile_sensor_data
from rclpy.timer import Timer
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

from xinfer_ros.core.constants import (
    ACTION_DIM,
    COMMIT_LENGTH,
    DEFAULT_MAX_BUDGET,
    KEYFRAME_SPACING,
    MAX_BUDGET,
    SEND_PERIOD,
)
from xinfer_ros.core.timing import MS_PER_S, next_send
from xinfer_ros.msg import (
    ActionChunk,
    ExecutorStats,
    FleetAssignment,
    PolicyRequest,
    ResponseBudget,
)
from xinfer_ros.nodes.params import ParamSpec, declare_params
from xinfer_ros.nodes.qos import LATCHED_QOS
from xinfer_ros.nodes.runtime import EXECUTOR_PARAM
from xinfer_ros.rtc.send_lag import SendLagStats
from xinfer_ros.rtc.smoothness import SpliceSmoothness
from xinfer_ros.rtc.splice import ActionQueue, SpliceError

__all__ = ["BUDGET_QOS", "PARAMS", "RtcExecutor", "main"]

#: The controller's budget is state, not a stream: the latest value reaches late joiners.
BUDGET_QOS = LATCHED_QOS
#: A transient-local subscription never matches a volatile publisher (a controller's
#: default QoS); the executor subscribes with both so that either kind reaches it.
BUDGET_QOS_VOLATILE = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE,
                                 durability=DurabilityPolicy.VOLATILE)
#: Startup behaviours before the first chunk.
STARTUP_MODES = ("silent", "hold_state")
#: Command outputs: per-tick commands, the chunk as a joint trajectory, or both.
OUTPUTS = ("commands", "trajectory", "both")

PARAMS = [
    ParamSpec("robot_id", "", "robot name sent with requests (default: the last part of "
              "the namespace)"),
    ParamSpec("keyframe_spacing_s", KEYFRAME_SPACING, "control tick Δ (s)", 0.001, 1.0),
    ParamSpec("horizon", 0, "keyframes per chunk H the server must return (0: whatever H "
              "the served model's chunks carry, e.g. 50 for π0)", 0, 1024),
    ParamSpec("action_dim", ACTION_DIM, "joints D", 1, 256),
    ParamSpec("commit_steps", COMMIT_LENGTH, "RTC frozen prefix d", 0, 1024),
    ParamSpec("min_period_s", SEND_PERIOD, "minimum request period T_E (s)", 0.0, 10.0),
    ParamSpec("default_budget_ms", 400.0, "budget until one arrives on budget (ms)",
              1.0, 60_000.0),
    ParamSpec("min_budget_ms", 1.0, "smallest budget sent; lower ones are clamped (ms)",
              0.001, MAX_BUDGET * MS_PER_S),
    ParamSpec("max_budget_ms", DEFAULT_MAX_BUDGET * MS_PER_S, "largest budget sent; higher "
              "ones are clamped (ms; the server's max_budget_ms)", 0.001, MAX_BUDGET * MS_PER_S),
    ParamSpec("startup", "silent", "before the first chunk: publish nothing (silent) or "
              "the measured joint positions from joint_states (hold_state)",
              choices=STARTUP_MODES),
    ParamSpec("output", "commands", "commands (Float64MultiArray per tick), trajectory "
              "(JointTrajectory per chunk on joint_trajectory) or both", choices=OUTPUTS),
    ParamSpec("joint_names", [""], "joint names of the trajectory output, in the model's "
              "order ([\"\"]: joint_0 .. joint_{D-1})",
              check=lambda v: None if list(v) == [""] or all(v) else "has an empty name"),
    ParamSpec("hold_timeout_s", 1.0, "hold the last command this long once the queue runs "
              "dry, then stop commanding until a chunk arrives (s)", 0.0, 3600.0),
    ParamSpec("request_timeout_s", 1.0, "abandon a request unanswered this long (s)",
              0.05, 60.0),
    ParamSpec("server_respawn", False, "the launch restarts a dead inference server "
              "(fleet.launch.py respawn:=true): /diagnostics says the executor waits for it"),
    ParamSpec("instruction", "pick up the parcel and place it on the conveyor",
              "language instruction sent with requests"),
    ParamSpec("stats_period_s", 1.0, "period of executor_stats (s)", 0.05, 60.0),
    ParamSpec("assignment_topic", "", "the fleet manager's latched FleetAssignment topic "
              "(e.g. /xinfer/assignment) when several servers serve the fleet: requests go "
              "to the assigned server only, chunks of any other are dropped, nothing is "
              "sent while none is assigned (empty: one server, whichever answers)"),
    EXECUTOR_PARAM,
]


def _check_params(p: dict[str, Any]) -> None:
    """Reject parameter combinations that no single range check catches.

    Raises:
        ValueError: If ``commit_steps`` exceeds a fixed ``horizon`` or the budget range is
            empty.
    """
    if p["horizon"] and p["commit_steps"] > p["horizon"]:
        raise ValueError(f"commit_steps {p['commit_steps']} exceeds horizon {p['horizon']}")
    if p["min_budget_ms"] > p["max_budget_ms"]:
        raise ValueError(f"parameter 'min_budget_ms'={p['min_budget_ms']} exceeds "
                         f"'max_budget_ms'={p['max_budget_ms']}")


class RtcExecutor(Node):
    """The executor of one robot; see the module docstring."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__("rtc_executor", **kwargs)
        p = declare_params(self, PARAMS)
        _check_params(p)
        self._configure(p)
        self._init_state()
        self._declare_interfaces()
        self._create_timers(p["stats_period_s"])
        self.get_logger().info(
            f"executor for {self.robot_id}: Δ={self.spacing * 1e3:.0f} ms, "
            f"H={self.horizon or 'from the chunks'}, "
            f"d={self.commit}, T_E={self.min_period * 1e3:.0f} ms, startup {self.startup}, "
            f"hold {self.hold_timeout:g} s")

    def _configure(self, p: dict[str, Any]) -> None:
        """Set the robot's name and the settings from the declared parameters ``p``."""
        # The robot's name is its namespace's last part (a site prefix may come first).
        namespace = self.get_namespace().strip("/").rsplit("/", 1)[-1]
        self.robot_id: str = p["robot_id"] or namespace or "robot"
        if namespace and self.robot_id != namespace:
            self.get_logger().warning(
                f"robot_id {self.robot_id!r} differs from the namespace's robot "
                f"{namespace!r}: the server rejects requests whose robot_id does not "
                "match their namespace")
        self.spacing: float = p["keyframe_spacing_s"]
        self.fixed_horizon: int = p["horizon"]
        #: H of the chunks being executed (the served model's; 0 until one arrives).
        self.horizon: int = p["horizon"]
        self.action_dim: int = p["action_dim"]
        self.commit: int = p["commit_steps"]
        self.min_period: float = p["min_period_s"]
        self.timeout: float = p["request_timeout_s"]
        self.instruction: str = p["instruction"]
        self.assignment_topic: str = p["assignment_topic"]
        #: Requests go to an assigned server (a fleet manager runs).
        self.managed = bool(self.assignment_topic)
        self.budget_range: tuple[float, float] = (p["min_budget_ms"], p["max_budget_ms"])
        self.budget_ms: float = self._clamp_budget(p["default_budget_ms"])
        self.budget_clamps = 0
        self.startup: str = p["startup"]
        self.hold_timeout: float = p["hold_timeout_s"]
        self.server_respawn: bool = p["server_respawn"]
        self.output: str = p["output"]
        names = [n for n in p["joint_names"] if n]
        if names and len(names) != self.action_dim:
            raise ValueError(f"parameter 'joint_names' has {len(names)} names for "
                             f"action_dim {self.action_dim}")
        self.joint_names = names or [f"joint_{i}" for i in range(self.action_dim)]

    def _init_state(self) -> None:
        """The chunk queue, the request bookkeeping and the counters, before any chunk."""
        self.queue = ActionQueue(self.action_dim)
        self.smoothness = SpliceSmoothness(self.action_dim)
        #: A chunk has been applied: commands flow (before it, see ``startup``).
        self.started = False
        #: Commands are being published now.
        self.commanding = False
        self.halts = 0
        self._dry_since: float | None = None
        self._measured: np.ndarray | None = None  # latest joint positions (hold_state)
        self.seq = 0
        self.requests_sent = 0
        self.request_timeouts = 0
        self.non_ok_chunks = 0
        self.last_latency_ms = float("nan")
        self._in_flight: tuple[int, int, float] | None = None  # (seq, send tick, send time)
        #: The server requests go to ("" without a fleet manager: any).
        self.server = ""
        #: Requests may be sent: always without a fleet manager; with one, once assigned.
        self.assigned = not self.managed
        self._unassigned_why = "waiting for the fleet assignment"
        self.server_switches = 0
        self.foreign_chunks = 0
        self._sent_unheard = False  # the request in flight went out with no server listening
        self._miss_counted = False
        self._next_send = 0.0
        self._eq1_due = False  # _next_send was set by Eq. 1 from a received chunk
        self.send_lag = SendLagStats()
        self._t0 = time.monotonic()
        self._tick = 0
        self._send_timer: Timer | None = None

    def _declare_interfaces(self) -> None:
        """Create the publishers (joint_trajectory only if ``output`` uses it) and subscriptions."""
        self.cmd_pub = self.create_publisher(Float64MultiArray, "commands", 10)
        self.traj_pub = self.create_publisher(JointTrajectory, "joint_trajectory", 10) \
            if self.output != "commands" else None
        self.req_pub = self.create_publisher(PolicyRequest, "policy_request", 10)
        self.stats_pub = self.create_publisher(ExecutorStats, "executor_stats", 10)
        self.diag_pub = self.create_publisher(DiagnosticArray, "/diagnostics", 10)
        for qos in (BUDGET_QOS, BUDGET_QOS_VOLATILE):
            self.create_subscription(ResponseBudget, "budget", self._on_budget, qos)
        if self.startup == "hold_state":
            self.create_subscription(JointState, "joint_states", self._on_joints,
                                     qos_profile_sensor_data)
        self._chunk_sub = self.create_subscription(ActionChunk, "action_chunk", self._on_chunk,
                                                   10)
        if self.managed:
            self.create_subscription(FleetAssignment, self.assignment_topic,
                                     self._on_assignment, LATCHED_QOS)

    def _create_timers(self, stats_period: float) -> None:
        """Start the keyframe tick and the ``executor_stats`` timer."""
        self.create_timer(self.spacing, self._on_timer)
        self.create_timer(stats_period, self._publish_stats)

    def _now_tick(self) -> int:
        return int((time.monotonic() - self._t0) / self.spacing)

    def _clamp_budget(self, budget_ms: float) -> float:
        low, high = self.budget_range
        return min(max(budget_ms, low), high)

    def _on_budget(self, msg: ResponseBudget) -> None:
        if not math.isfinite(msg.budget_ms) or msg.budget_ms <= 0:
            self.budget_clamps += 1
            self.get_logger().warning(f"ignoring budget {msg.budget_ms} ms (must be > 0)",
                                      throttle_duration_sec=5.0)
            return
        budget = self._clamp_budget(float(msg.budget_ms))
        if budget != msg.budget_ms:
            self.budget_clamps += 1
            low, high = self.budget_range
            self.get_logger().warning(
                f"budget {msg.budget_ms:g} ms outside [{low:g}, {high:g}] ms; sending "
                f"{budget:g} ms", throttle_duration_sec=5.0)
        self.budget_ms = budget

    def _on_joints(self, msg: JointState) -> None:
        if len(msg.position) == self.action_dim:
            self._measured = np.asarray(msg.position, dtype=np.float64)
        else:
            self.get_logger().warning(
                f"joint_states has {len(msg.position)} positions, the robot {self.action_dim}"
                "; startup hold_state publishes nothing", throttle_duration_sec=10.0)

    def _on_timer(self) -> None:
        now = time.monotonic()
        # Catch up on ticks a busy executor missed, so keyframes stay on the time grid.
        target = self._now_tick()
        if not self.started:
            self._tick = max(self._tick, target + 1)
            if self.startup == "hold_state" and self._measured is not None:
                self._command(self._measured)
            self._maybe_send(now)
            return
        command, starved = None, False
        while self._tick <= target:
            command, starved = self.queue.pop(self._tick)
            self.smoothness.record(command, None if starved else self.queue.origin_tick)
            self._tick += 1
        if command is not None:
            self._hold_or_halt(now, starved)
        if command is not None and self.commanding:
            self._command(command)
        self._maybe_send(now)

    def _command(self, command: np.ndarray) -> None:
        """Publish one tick's command (``output`` commands or both)."""
        if self.output != "trajectory":
            self.cmd_pub.publish(Float64MultiArray(data=command.tolist()))

    def _publish_trajectory(self) -> None:
        """The queued keyframes from the next tick on, as a joint trajectory."""
        if self.traj_pub is None:
            return
        start = self._tick
        keyframes = self.queue.planned(start, self.queue.remaining(start))
        msg = JointTrajectory(joint_names=self.joint_names)
        # The stamp is the next tick's time: point k is due k keyframes after it.
        due = self._t0 + start * self.spacing - time.monotonic()
        msg.header.stamp = (self.get_clock().now()
                            + RosDuration(seconds=max(0.0, due))).to_msg()
        for k, row in enumerate(keyframes):
            nanos = round(k * self.spacing * 1e9)
            msg.points.append(JointTrajectoryPoint(
                positions=row.tolist(),
                time_from_start=Duration(sec=nanos // 10**9, nanosec=nanos % 10**9)))
        self.traj_pub.publish(msg)

    def _hold_or_halt(self, now: float, starved: bool) -> None:
        """Hold the last command for ``hold_timeout_s`` of an empty queue, then stop."""
        if not starved:
            self._dry_since = None
            return
        if self._dry_since is None:
            self._dry_since = now
        if self.commanding and now - self._dry_since > self.hold_timeout:
            self.commanding = False
            self.halts += 1
            self.get_logger().error(
                f"no new chunk for {now - self._dry_since:.2f} s after the queue ran dry: "
                "commands stopped (the controller holds) until a chunk arrives")

    def _maybe_send(self, now: float) -> None:
        if self._in_flight is not None:
            seq, _, sent = self._in_flight
            if not self._miss_counted and now > sent + self.min_period:
                self.queue.record_trigger_miss()
                self._miss_counted = True
            # A server that (re)appeared never saw the request in flight: resend now
            # rather than wait for the timeout.
            reappeared = self._sent_unheard and self._server_present()
            if now - sent < self.timeout and not reappeared:
                return
            if reappeared:
                self.get_logger().info(f"server appeared; resending request {seq}")
                self._in_flight = None
                self._next_send = now
                self._eq1_due = False
                self._send(now)
                return
            self.request_timeouts += 1
            self.get_logger().warning(
                f"request {seq} unanswered after {self.timeout:.2f} s; holding and resending")
            self._in_flight = None
            self._next_send = now
            self._eq1_due = False
        if now < self._next_send or not self.assigned:
            return
        if self._eq1_due:
            self.send_lag.record(now - self._next_send)
            self._eq1_due = False
        self._send(now)

    def _send(self, now: float) -> None:
        self.seq += 1
        tick = self._tick
        msg = PolicyRequest(robot_id=self.robot_id, seq=self.seq, budget_ms=self.budget_ms,
                            commit_steps=self.commit, keyframe_spacing_s=self.spacing,
                            instruction=self.instruction, server=self.server)
        msg.header.stamp = self.get_clock().now().to_msg()
        if self.requests_sent > 0 and self.horizon:
            prev = self.queue.planned(tick, self.horizon)
            msg.prev_chunk = prev.astype(np.float32).ravel().tolist()
            msg.prev_horizon, msg.prev_action_dim = self.horizon, self.action_dim
            # s of Eq. 5: rows past the queued keyframes are padding, not a plan.
            msg.prev_shift = self.horizon - min(self.horizon, self.queue.remaining(tick))
        self._sent_unheard = not self._server_present()
        self.req_pub.publish(msg)
        self.requests_sent += 1
        self._in_flight = (self.seq, tick, now)
        self._miss_counted = False

    def _server_present(self) -> bool:
        # Only a server publishes action_chunk; recorders and monitors also subscribe to
        # policy_request, so its subscriber count does not tell a server is there.
        return self.count_publishers(self._chunk_sub.topic_name) > 0

    def _on_assignment(self, msg: FleetAssignment) -> None:
        """Switch to the server the fleet manager assigned; resend to it at once."""
        try:
            server = msg.servers[list(msg.robots).index(self.robot_id)]
        except (ValueError, IndexError):
            server, why = "", f"not in the fleet assignment (epoch {msg.epoch})"
        else:
            why = ("no live server has room for this robot or may serve it (fleet "
                   f"assignment {msg.epoch}: {msg.reason})")
        if server == self.server and self.assigned == bool(server):
            self._unassigned_why = "" if server else why
            return
        if self.server and server:
            self.server_switches += 1
        previous, self.server, self.assigned = self.server, server, bool(server)
        self._unassigned_why = "" if server else why
        # The request in flight went to the server left behind: its answer is never
        # applied, and the new server gets a request now, not at the timeout.
        self._in_flight = None
        self._next_send = time.monotonic()
        self._eq1_due = False
        if server:
            self.get_logger().info(f"assigned to server {server!r}"
                                   + (f" (was {previous!r})" if previous else "")
                                   + f": {msg.reason}")
            self._maybe_send(self._next_send)
        else:
            self.get_logger().error(f"no server assigned: {why}; sending nothing")

    def _on_chunk(self, msg: ActionChunk) -> None:
        if msg.robot_id != self.robot_id:
            return
        if self.managed and msg.server != self.server:
            self.foreign_chunks += 1  # a late answer of a server this robot left
            return
        if self._in_flight is None or msg.seq != self._in_flight[0]:
            return  # an answer to an abandoned request, or a replay: never applied
        seq, send_tick, sent = self._in_flight
        now = time.monotonic()
        self.last_latency_ms = (now - sent) * 1e3
        self._in_flight = None
        self._next_send = next_send(sent, now, self.min_period)
        self._eq1_due = True
        self._arm_send_timer(self._next_send - now)
        if msg.status != ActionChunk.STATUS_OK:
            self.non_ok_chunks += 1
            self.get_logger().warning(f"request {seq}: status {msg.status}: {msg.reason}")
            return
        try:
            self._check_horizon(msg.horizon)
            chunk = np.asarray(msg.actions, dtype=np.float64).reshape(
                msg.horizon, msg.action_dim)
            self.queue.splice(chunk, send_tick, max(self._tick, send_tick), self.commit)
            self.horizon = int(msg.horizon)
            if not self.commanding:
                self.get_logger().info("chunk received: commanding the robot")
            self.started = self.commanding = True
            self._dry_since = None
            self._publish_trajectory()
        except (ValueError, SpliceError) as exc:
            self.non_ok_chunks += 1
            self.get_logger().warning(f"request {seq}: unusable chunk: {exc}")

    def _check_horizon(self, horizon: int) -> None:
        """Refuse a chunk of the wrong length (raises ``ValueError``)."""
        if self.fixed_horizon and horizon != self.fixed_horizon:
            raise ValueError(f"chunk has H={horizon}; parameter horizon requires "
                             f"{self.fixed_horizon}")
        if horizon < self.commit:
            raise ValueError(f"chunk has H={horizon}, shorter than commit_steps {self.commit}")

    def _arm_send_timer(self, delay: float) -> None:
        # Sends happen at s_j + T_E itself, not at the next control tick.
        if self._send_timer is not None:
            self.destroy_timer(self._send_timer)
        self._send_timer = self.create_timer(max(delay, 1e-4), self._on_send_timer)

    def _on_send_timer(self) -> None:
        if self._send_timer is not None:
            self.destroy_timer(self._send_timer)
            self._send_timer = None
        self._maybe_send(time.monotonic())

    def _publish_stats(self) -> None:
        c = self.queue.counters
        msg = ExecutorStats(
            robot_id=self.robot_id, ticks=c.ticks, starved_ticks=c.starved_ticks,
            handoff_violations=c.handoff_violations, stale_chunks=c.stale_chunks,
            trigger_misses=c.trigger_misses, chunks_applied=c.chunks_applied,
            requests_sent=self.requests_sent, request_timeouts=self.request_timeouts,
            non_ok_chunks=self.non_ok_chunks, server=self.server, assigned=self.assigned,
            server_switches=self.server_switches, foreign_chunks=self.foreign_chunks,
            budget_ms=self.budget_ms,
            budget_clamps=self.budget_clamps,
            last_latency_ms=self.last_latency_ms, send_lag_mean_ms=self.send_lag.mean_ms,
            send_lag_p95_ms=self.send_lag.p95_ms, send_lag_max_ms=self.send_lag.max_ms,
            commanding=self.commanding, halts=self.halts,
            switch_step_max=self.smoothness.switch_max.tolist(),
            within_step_max=self.smoothness.within_max.tolist())
        msg.header.stamp = self.get_clock().now().to_msg()
        self.stats_pub.publish(msg)
        self.diag_pub.publish(self._diagnostics(msg))

    def _diagnostics(self, stats: ExecutorStats) -> DiagnosticArray:
        if not self.assigned:
            level, text = DiagnosticStatus.WARN, f"not served: {self._unassigned_why}"
        elif self._in_flight is not None and not self._server_present():
            stopped = self.started and not self.commanding
            level = DiagnosticStatus.ERROR if stopped else DiagnosticStatus.WARN
            text = "no inference server publishes action_chunk" + (
                ", waiting for the launch to restart it (respawn)" if self.server_respawn
                else "") + (": commands stopped" if stopped else "")
        elif not self.started:
            level, text = DiagnosticStatus.WARN, f"waiting for the first chunk ({self.startup})"
        elif not self.commanding:
            level, text = DiagnosticStatus.ERROR, (
                f"no chunk for over {self.hold_timeout:g} s: commands stopped")
        elif self._dry_since is not None:
            level, text = DiagnosticStatus.WARN, "action queue empty: holding the last command"
        else:
            level, text = DiagnosticStatus.OK, "commanding"
        diag = DiagnosticArray()
        diag.header.stamp = stats.header.stamp
        diag.status.append(DiagnosticStatus(
            level=level, name=f"xinfer/executor/{self.robot_id}", hardware_id=self.robot_id,
            message=text, values=[
                KeyValue(key="commanding", value=str(self.commanding).lower()),
                KeyValue(key="halts", value=str(self.halts)),
                KeyValue(key="starved_ticks", value=str(stats.starved_ticks)),
                KeyValue(key="request_timeouts", value=str(self.request_timeouts)),
                KeyValue(key="server", value=self.server),
                KeyValue(key="foreign_chunks", value=str(self.foreign_chunks)),
                KeyValue(key="budget_ms", value=f"{self.budget_ms:g}")]))
        return diag


def main(argv: list[str] | None = None) -> int:
    """Run the executor until SIGINT; return the exit status."""
    from xinfer_ros.nodes.runtime import spin_node

    return spin_node(RtcExecutor, argv)


if __name__ == "__main__":
    sys.exit(main())
