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

The decisions live in :class:`xinfer_ros.rtc.executor_core.ExecutorCore` (no ROS);
this node turns messages into its calls. On a real arm (see the README, "Real
robots"):

- **Managed lifecycle.** A lifecycle node: ``configure`` (subscribed, validated,
  nothing commanded), ``activate`` (requesting and commanding), ``deactivate``
  (commands stop at once; a ``joint_trajectory`` output gets an empty trajectory, which
  stops joint_trajectory_controller). ``autostart`` (default true) configures and
  activates at start; with ``autostart:=false``, ``ros2 lifecycle set <node>
  configure`` / ``activate``.
- **Engage.** Commanding (re)starts with a blend from the measured ``joint_states``
  into the policy's commands over ``engage_ramp_s``.
- **Command limits** per joint (``min_position``, ``max_position``, ``max_velocity``,
  ``max_acceleration``, ``max_jerk``, or ``joint_limits_file`` in ros2_control's
  ``joint_limits`` format): clamped, or commands stop (``limit_action``).
- **Chunk sanity.** Chunks answering no request in flight, from another server, with
  observation stamps older than the request minus ``max_observation_age_s`` or later
  than it plus ``max_clock_skew_s``, with NaN/Inf or actions beyond the position
  bounds are dropped and counted by reason in ``executor_stats``.
- **Wall-clock watchdog.** A steady-clock timer reports ERROR on ``/diagnostics`` and
  stops commands when the control tick has not run for ``watchdog_ticks × Δ`` (a node
  clock that stopped: ``use_sim_time`` without ``/clock``).
- **Strangers.** Any node but this executor publishing ``policy_request``, or a second
  publisher of ``action_chunk`` without a fleet manager, is a WARN on ``/diagnostics``
  (``xinfer/executor/<robot>/publishers``) naming it. ``policy_request`` is keep-last 1
  (:data:`xinfer_ros.nodes.qos.REQUEST_QOS`): a server resuming after a stall gets the
  newest request, not a replay of the stale ones.

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
import secrets
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from builtin_interfaces.msg import Duration
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from rclpy.clock import Clock, ClockType
from rclpy.duration import Duration as RosDuration
from rclpy.lifecycle import LifecycleState, TransitionCallbackReturn
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy, qos_profile_sensor_data
from rclpy.subscription import Subscription
from rclpy.time import Time as RosTime
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
from xinfer_ros.core.timing import MS_PER_S
from xinfer_ros.msg import (
    ActionChunk,
    ExecutorStats,
    FleetAssignment,
    PolicyRequest,
    ResponseBudget,
)
from xinfer_ros.nodes.graph import publishing_nodes
from xinfer_ros.nodes.lifetime import LifecycleNode, destroyed_on_failure
from xinfer_ros.nodes.params import ParamSpec, declare_params
from xinfer_ros.nodes.qos import LATCHED_QOS, REQUEST_QOS
from xinfer_ros.nodes.runtime import EXECUTOR_PARAM
from xinfer_ros.rtc.command_gate import LimitAction
from xinfer_ros.rtc.executor_core import (
    STARTUP_MODES,
    Chunk,
    DropReason,
    ExecutorConfig,
    ExecutorCore,
    Level,
    Lifecycle,
    Request,
    strangers,
)
from xinfer_ros.rtc.limits import CommandLimits, limits_from_yaml
from xinfer_ros.rtc.send_lag import SendLagStats
from xinfer_ros.rtc.smoothness import SpliceSmoothness
from xinfer_ros.rtc.splice import ActionQueue
from xinfer_ros.serving.observations import Stamp
from xinfer_ros.serving.params import Params

__all__ = ["BUDGET_QOS", "PARAMS", "RtcExecutor", "main"]

#: The controller's budget is state, not a stream: the latest value reaches late joiners.
BUDGET_QOS = LATCHED_QOS
#: A transient-local subscription never matches a volatile publisher (a controller's
#: default QoS); the executor subscribes with both so that either kind reaches it.
BUDGET_QOS_VOLATILE = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE,
                                 durability=DurabilityPolicy.VOLATILE)
#: Command outputs: per-tick commands, the chunk as a joint trajectory, or both.
OUTPUTS = ("commands", "trajectory", "both")


def _limit_list(name: str, default: float, what: str) -> ParamSpec:
    return ParamSpec(name, [default], f"{what}: one value for every joint or one per "
                     f"joint in the model's order ({default} : none; tightened by "
                     "joint_limits_file)",
                     check=lambda v: None if len(v) and all(
                         isinstance(x, float) for x in v) else "needs floats")


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
    ParamSpec("joint_names", [""], "joint names of the trajectory output, joint_states "
              "and joint_limits_file, in the model's order ([\"\"]: joint_0 .. joint_{D-1})",
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
    ParamSpec("autostart", True, "configure and activate at start (false: wait for "
              "'ros2 lifecycle set <node> configure' and 'activate')"),
    ParamSpec("engage_ramp_s", 1.0, "on activation (and when commands resume) blend from "
              "the measured joint_states into the policy's commands over this long (s)",
              check=lambda v: None if v > 0.0 and math.isfinite(v)
              else f"must be > 0, got {v}"),
    ParamSpec("limit_action", "clamp", "a command beyond a joint limit is clamped (clamp) "
              "or stops commands until the executor is activated again (stop)",
              choices=tuple(a.value for a in LimitAction)),
    ParamSpec("joint_limits_file", "", "ros2_control joint_limits YAML keyed by joint_names "
              "(has_position_limits, min_position, ..., max_jerk; empty: none)"),
    _limit_list("min_position", -math.inf, "lowest position per joint"),
    _limit_list("max_position", math.inf, "highest position per joint"),
    _limit_list("max_velocity", math.inf, "speed limit per joint (units/s)"),
    _limit_list("max_acceleration", math.inf, "acceleration limit per joint (units/s²)"),
    _limit_list("max_jerk", math.inf, "jerk limit per joint (units/s³)"),
    ParamSpec("max_observation_age_s", 0.5, "drop chunks whose observations are stamped "
              "more than this before their request (s; the server's max_observation_age_s)",
              0.001, 60.0),
    ParamSpec("max_clock_skew_s", 0.1, "drop chunks whose observations are stamped more "
              "than this after their request (s)", 0.0, 60.0),
    ParamSpec("watchdog_ticks", 2.0, "stop commanding when the control tick has not run "
              "for this many ticks of wall time", 1.5, 1000.0),
    EXECUTOR_PARAM,
]


def _robot_id(namespace: str, p: Params) -> tuple[str, str]:
    """The robot's name and the namespace's robot (the namespace's last part)."""
    ns_robot = namespace.strip("/").rsplit("/", 1)[-1]
    return p["robot_id"] or ns_robot or "robot", ns_robot


def _joint_names(p: Params) -> list[str]:
    names = [n for n in p["joint_names"] if n]
    if names and len(names) != p["action_dim"]:
        raise ValueError(f"parameter 'joint_names' has {len(names)} names for "
                         f"action_dim {p['action_dim']}")
    return names or [f"joint_{i}" for i in range(p["action_dim"])]


def _limits(p: Params, names: list[str]) -> CommandLimits:
    """The parameters' limits, tightened by ``joint_limits_file`` (raises ``ValueError``)."""
    fields = ("min_position", "max_position", "max_velocity", "max_acceleration", "max_jerk")
    try:
        limits = CommandLimits.build(len(names), names=names,
                                     **{f: list(p[f]) for f in fields})
    except ValueError as exc:
        raise ValueError(f"limit parameters: {exc}") from None
    if not p["joint_limits_file"]:
        return limits
    file = limits_from_yaml(Path(p["joint_limits_file"]), names)
    return CommandLimits.build(
        len(names), names=names,
        min_position=np.maximum(limits.min_position, file.min_position).tolist(),
        max_position=np.minimum(limits.max_position, file.max_position).tolist(),
        max_velocity=np.minimum(limits.max_velocity, file.max_velocity).tolist(),
        max_acceleration=np.minimum(limits.max_acceleration, file.max_acceleration).tolist(),
        max_jerk=np.minimum(limits.max_jerk, file.max_jerk).tolist())


def _config(robot_id: str, p: Params, limits: CommandLimits) -> ExecutorConfig:
    """The core's settings from the declared parameters (raises ``ValueError``)."""
    return ExecutorConfig(
        robot_id=robot_id, action_dim=p["action_dim"], spacing=p["keyframe_spacing_s"],
        commit=p["commit_steps"], min_period=p["min_period_s"],
        request_timeout=p["request_timeout_s"], hold_timeout=p["hold_timeout_s"],
        fixed_horizon=p["horizon"], startup=p["startup"],
        managed=bool(p["assignment_topic"]),
        budget_range=(p["min_budget_ms"], p["max_budget_ms"]),
        default_budget_ms=p["default_budget_ms"], limits=limits,
        limit_action=LimitAction(p["limit_action"]), engage_ramp=p["engage_ramp_s"],
        max_observation_age=p["max_observation_age_s"],
        max_clock_skew=p["max_clock_skew_s"], watchdog_ticks=p["watchdog_ticks"],
        server_respawn=p["server_respawn"])


def _seconds(stamp: Stamp) -> float:
    return float(stamp.sec) + float(stamp.nanosec) * 1e-9


class RtcExecutor(LifecycleNode):
    """The executor of one robot; see the module docstring.

    Parameters are declared and validated at construction (bad ones raise
    ``ValueError``: exit 2), before any transition.
    """

    @destroyed_on_failure
    def __init__(self, **kwargs: Any) -> None:
        super().__init__("rtc_executor", **kwargs)
        p = declare_params(self, PARAMS)
        self.robot_id, ns_robot = _robot_id(self.get_namespace(), p)
        if ns_robot and self.robot_id != ns_robot:
            self.get_logger().warning(
                f"robot_id {self.robot_id!r} differs from the namespace's robot "
                f"{ns_robot!r}: the server rejects requests whose robot_id does not "
                "match their namespace")
        self.joint_names = _joint_names(p)
        self.params = p
        self.spacing: float = p["keyframe_spacing_s"]
        self.action_dim: int = p["action_dim"]
        self.output: str = p["output"]
        self.assignment_topic: str = p["assignment_topic"]
        self.core = ExecutorCore(_config(self.robot_id, p, _limits(p, self.joint_names)),
                                 t0=time.monotonic(), log=self._log)
        self.core.state = Lifecycle.UNCONFIGURED
        self._timers: list[Timer] = []
        self._subs: list[Subscription] = []
        self._send_timer: Timer | None = None
        self._last_wall_diag = -math.inf
        self._stopped_output = False  # an empty trajectory went out since the last chunk
        self._warned_strangers: list[str] = []
        #: Random per process: a second requester on this robot's topic has another.
        self._session = secrets.token_hex(8)
        if p["autostart"]:
            self.trigger_configure()
            self.trigger_activate()

    # -- lifecycle ----------------------------------------------------------------------
    def on_configure(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Subscribe and start the timers; nothing is commanded until activation."""
        self._declare_interfaces()
        self._create_timers(self.params["stats_period_s"])
        self.core.state = Lifecycle.INACTIVE
        lim = self.core.limits
        self.get_logger().info(
            f"executor for {self.robot_id}: Δ={self.spacing * 1e3:.0f} ms, "
            f"H={self.core.horizon or 'from the chunks'}, d={self.core.config.commit}, "
            f"T_E={self.core.config.min_period * 1e3:.0f} ms, startup "
            f"{self.core.config.startup}, hold {self.core.config.hold_timeout:g} s, engage "
            f"{self.core.config.engage_ramp:g} s, limits "
            f"{'on (' + self.core.config.limit_action.value + ')' if lim.bounded else 'none'}"
            "; inactive")
        return TransitionCallbackReturn.SUCCESS

    def on_activate(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Start requesting; commands follow the first chunk through the engage ramp."""
        # The first request goes out at the next tick (the node is spinning by then).
        self.core.activate(time.monotonic())
        return TransitionCallbackReturn.SUCCESS

    def on_deactivate(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Stop commands at once (and a trajectory being executed)."""
        self.core.deactivate()
        self._stop_trajectory()
        self._publish_stats()
        return TransitionCallbackReturn.SUCCESS

    def on_cleanup(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Back to unconfigured: timers and interfaces go."""
        self._teardown()
        self.core.state = Lifecycle.UNCONFIGURED
        return TransitionCallbackReturn.SUCCESS

    def on_shutdown(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Stop commands on the way out."""
        self.core.deactivate()
        self._stop_trajectory()
        return TransitionCallbackReturn.SUCCESS

    def _teardown(self) -> None:
        for timer in [*self._timers, *([self._send_timer] if self._send_timer else [])]:
            self.destroy_timer(timer)
        self._timers, self._send_timer = [], None
        for sub in self._subs:
            self.destroy_subscription(sub)
        self._subs = []

    # -- interfaces ---------------------------------------------------------------------
    def _declare_interfaces(self) -> None:
        """Create the publishers (joint_trajectory only if ``output`` uses it) and subscriptions."""
        if not hasattr(self, "cmd_pub"):
            self.cmd_pub = self.create_publisher(Float64MultiArray, "commands", 10)
            self.traj_pub = self.create_publisher(JointTrajectory, "joint_trajectory", 10) \
                if self.output != "commands" else None
            self.req_pub = self.create_publisher(PolicyRequest, "policy_request", REQUEST_QOS)
            self.stats_pub = self.create_publisher(ExecutorStats, "executor_stats", 10)
            self.diag_pub = self.create_publisher(DiagnosticArray, "/diagnostics", 10)
        self._subs = [self.create_subscription(ResponseBudget, "budget", self._on_budget, qos)
                      for qos in (BUDGET_QOS, BUDGET_QOS_VOLATILE)]
        self._subs.append(self.create_subscription(JointState, "joint_states", self._on_joints,
                                                   qos_profile_sensor_data))
        # Chunks are matched to the request in flight; a deeper queue loses none of them
        # to a busy spin (dropped ones are counted by reason).
        self._chunk_sub = self.create_subscription(ActionChunk, "action_chunk", self._on_chunk,
                                                   10)
        self._subs.append(self._chunk_sub)
        if self.assignment_topic:
            self._subs.append(self.create_subscription(
                FleetAssignment, self.assignment_topic, self._on_assignment, LATCHED_QOS))

    def _create_timers(self, stats_period: float) -> None:
        """The keyframe tick, ``executor_stats`` and the wall-clock watchdog."""
        steady = Clock(clock_type=ClockType.STEADY_TIME)
        self._timers = [self.create_timer(self.spacing, self._on_timer),
                        self.create_timer(stats_period, self._publish_stats),
                        self.create_timer(self.spacing, self._on_watchdog, clock=steady)]

    def _log(self, level: Level, text: str) -> None:
        # One call site per severity: rclpy's logger refuses another severity at a site.
        logger = self.get_logger()
        if level == Level.ERROR:
            logger.error(text)
        elif level == Level.WARN:
            logger.warning(text)
        else:
            logger.info(text)

    # -- callbacks ----------------------------------------------------------------------
    def _on_budget(self, msg: ResponseBudget) -> None:
        warning = self.core.set_budget(float(msg.budget_ms))
        if warning:
            self.get_logger().warning(warning, throttle_duration_sec=5.0)

    def _on_joints(self, msg: JointState) -> None:
        positions = list(msg.position)
        if msg.name and all(n in msg.name for n in self.joint_names) \
                and len(msg.name) == len(positions):
            index = {n: i for i, n in enumerate(msg.name)}
            positions = [positions[index[n]] for n in self.joint_names]
        if len(positions) == self.action_dim and all(map(math.isfinite, positions)):
            self.core.measure(np.asarray(positions, dtype=np.float64))
        else:
            self.get_logger().warning(
                f"joint_states has {len(msg.position)} positions (or a non-finite one), "
                f"the robot {self.action_dim}: not used (startup hold_state and engage)",
                throttle_duration_sec=10.0)

    def _on_timer(self) -> None:
        command = self.core.tick(time.monotonic())
        if command is not None and self.output != "trajectory":
            self.cmd_pub.publish(Float64MultiArray(data=command.tolist()))
        if self.core.limit_stopped and not self._stopped_output:
            self._stop_trajectory()
        self._maybe_send()

    def _on_watchdog(self) -> None:
        now = time.monotonic()
        was = self.core.watchdog_tripped
        if not self.core.check_watchdog(now):
            return
        if not was:
            self._stop_trajectory()
        # The node clock is stopped: report from here, at the stats period.
        if now - self._last_wall_diag >= self.params["stats_period_s"] or not was:
            self._last_wall_diag = now
            self._publish_stats()

    def _maybe_send(self) -> None:
        if not hasattr(self, "req_pub"):
            return
        request = self.core.poll_send(time.monotonic(),
                                      _seconds(self.get_clock().now().to_msg()),
                                      self._server_present)
        if request is not None:
            self.req_pub.publish(self._request_msg(request))

    def _request_msg(self, req: Request) -> PolicyRequest:
        """The PolicyRequest for the core's ``req`` (every field set here)."""
        msg = PolicyRequest(robot_id=self.robot_id, seq=req.seq, budget_ms=req.budget_ms,
                            commit_steps=self.core.config.commit,
                            keyframe_spacing_s=self.spacing,
                            instruction=self.params["instruction"], server=req.server)
        # The session id: the server serves one sender per robot (serving.sessions).
        msg.header.frame_id = self._session
        msg.header.stamp = RosTime(nanoseconds=round(req.stamp * 1e9)).to_msg()
        if req.prev_chunk is not None:
            msg.prev_chunk = req.prev_chunk.astype(np.float32).ravel().tolist()
            msg.prev_horizon, msg.prev_action_dim = req.prev_chunk.shape
            msg.prev_shift = req.prev_shift
        return msg

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
        previous = self.core.server
        if not self.core.assign(server, why, time.monotonic()):
            return
        if server:
            self.get_logger().info(f"assigned to server {server!r}"
                                   + (f" (was {previous!r})" if previous else "")
                                   + f": {msg.reason}")
            self._maybe_send()
        else:
            self.get_logger().error(f"no server assigned: {why}; sending nothing")

    def _on_chunk(self, msg: ActionChunk) -> None:
        stamps = (*(_seconds(s) for s in msg.image_stamps), _seconds(msg.state_stamp))
        chunk = Chunk(robot_id=msg.robot_id, seq=int(msg.seq), server=msg.server,
                      status=int(msg.status), reason=msg.reason, horizon=int(msg.horizon),
                      action_dim=int(msg.action_dim), actions=msg.actions, stamps=stamps)
        before = self.core.in_flight_seq
        dropped = self.core.on_chunk(chunk, time.monotonic())
        if self.core.in_flight_seq is None and before is not None:
            self._arm_send_timer(self.core.next_send_at - time.monotonic())
        if dropped is None:
            self._stopped_output = False
            self._publish_trajectory()

    # -- outputs ------------------------------------------------------------------------

    def _publish_trajectory(self) -> None:
        """The queued keyframes from the next tick on, through the gate."""
        if self.traj_pub is None:
            return
        keyframes = self.core.trajectory()
        if keyframes is None:
            return
        msg = JointTrajectory(joint_names=self.joint_names)
        # The stamp is the next tick's time: point k is due k keyframes after it.
        due = self.core.t0 + self.core.next_tick * self.spacing - time.monotonic()
        msg.header.stamp = (self.get_clock().now()
                            + RosDuration(seconds=max(0.0, due))).to_msg()
        for k, row in enumerate(keyframes):
            nanos = round(k * self.spacing * 1e9)
            msg.points.append(JointTrajectoryPoint(
                positions=row.tolist(),
                time_from_start=Duration(sec=nanos // 10**9, nanosec=nanos % 10**9)))
        self.traj_pub.publish(msg)

    def _stop_trajectory(self) -> None:
        """An empty trajectory: joint_trajectory_controller stops and holds where it is."""
        self._stopped_output = True
        publisher = getattr(self, "traj_pub", None)
        if publisher is not None:
            publisher.publish(JointTrajectory(joint_names=self.joint_names))

    def _arm_send_timer(self, delay: float) -> None:
        # Sends happen at s_j + T_E itself, not at the next control tick.
        if self._send_timer is not None:
            self.destroy_timer(self._send_timer)
        self._send_timer = self.create_timer(max(delay, 1e-4), self._on_send_timer)

    def _on_send_timer(self) -> None:
        if self._send_timer is not None:
            self.destroy_timer(self._send_timer)
            self._send_timer = None
        self._maybe_send()

    # -- state the tests and tools read --------------------------------------------------
    @property
    def started(self) -> bool:
        """A chunk was applied since the activation."""
        return self.core.started

    @property
    def commanding(self) -> bool:
        """Commands are being published."""
        return self.core.commanding

    @property
    def queue(self) -> ActionQueue:
        """The core's action queue (its counters)."""
        return self.core.queue

    @property
    def smoothness(self) -> SpliceSmoothness:
        """Splice smoothness per joint."""
        return self.core.smoothness

    @property
    def send_lag(self) -> SendLagStats:
        """Lateness of Eq. 1 sends."""
        return self.core.send_lag

    @property
    def foreign_chunks(self) -> int:
        """Chunks dropped for coming from another server than the one asked."""
        return self.core.drops[DropReason.FOREIGN_SERVER]

    def __getattr__(self, name: str) -> Any:
        # Counters and settings the node reports as its own (halts, seq, budget_ms, ...).
        if name in _CORE_FIELDS and "core" in self.__dict__:
            return getattr(self.__dict__["core"], name)
        raise AttributeError(name)

    # -- stats and diagnostics ------------------------------------------------------------
    def _publish_stats(self) -> None:
        if not hasattr(self, "stats_pub"):
            return
        core, c, drops = self.core, self.core.queue.counters, self.core.drops
        msg = ExecutorStats(
            robot_id=self.robot_id, ticks=c.ticks, starved_ticks=c.starved_ticks,
            handoff_violations=c.handoff_violations, stale_chunks=c.stale_chunks,
            trigger_misses=c.trigger_misses, chunks_applied=c.chunks_applied,
            requests_sent=core.requests_sent, request_timeouts=core.request_timeouts,
            non_ok_chunks=drops[DropReason.NON_OK], server=core.server,
            assigned=core.assigned, server_switches=core.server_switches,
            foreign_chunks=drops[DropReason.FOREIGN_SERVER], budget_ms=core.budget_ms,
            budget_clamps=core.budget_clamps,
            last_latency_ms=core.last_latency_ms, send_lag_mean_ms=core.send_lag.mean_ms,
            send_lag_p95_ms=core.send_lag.p95_ms, send_lag_max_ms=core.send_lag.max_ms,
            commanding=core.commanding, halts=core.halts,
            switch_step_max=core.smoothness.switch_max.tolist(),
            within_step_max=core.smoothness.within_max.tolist(),
            lifecycle=core.state.value, engaging=core.commanding and core.gate.engaging,
            limit_clamps=core.gate.clamps, limit_stops=core.gate.stops,
            last_limit=",".join(core.gate.last_broken), watchdog_trips=core.watchdog_trips,
            unanswering_chunks=drops[DropReason.NOT_IN_FLIGHT],
            invalid_chunks=drops[DropReason.MALFORMED] + drops[DropReason.NON_FINITE],
            out_of_limit_chunks=drops[DropReason.OUT_OF_LIMITS],
            stale_observation_chunks=drops[DropReason.STALE_OBSERVATION],
            future_observation_chunks=drops[DropReason.FUTURE_OBSERVATION])
        msg.header.stamp = self.get_clock().now().to_msg()
        self.stats_pub.publish(msg)
        self.diag_pub.publish(self._diagnostics(msg))

    def _strangers(self) -> list[str]:
        """Unexpected publishers on this robot's request and chunk topics."""
        if not hasattr(self, "req_pub"):
            return []
        chunk_publishers = publishing_nodes(self, self._chunk_sub.topic_name)
        # With a fleet manager every server publishes every robot's chunks.
        servers = len(chunk_publishers) if self.assignment_topic else 1
        return strangers(self.get_fully_qualified_name(),
                         publishing_nodes(self, self.req_pub.topic_name), chunk_publishers,
                         servers)

    def _diagnostics(self, stats: ExecutorStats) -> DiagnosticArray:
        level, text = self.core.status(server_present=self._server_present())
        diag = DiagnosticArray()
        diag.header.stamp = stats.header.stamp
        values = {
            "lifecycle": stats.lifecycle, "commanding": str(stats.commanding).lower(),
            "halts": str(stats.halts), "starved_ticks": str(stats.starved_ticks),
            "request_timeouts": str(stats.request_timeouts), "server": stats.server,
            "foreign_chunks": str(stats.foreign_chunks), "budget_ms": f"{stats.budget_ms:g}",
            "limit_clamps": str(stats.limit_clamps), "limit_stops": str(stats.limit_stops),
            "watchdog_trips": str(stats.watchdog_trips),
            **{f"dropped_{r.value}": str(n) for r, n in sorted(self.core.drops.items())}}
        diag.status.append(DiagnosticStatus(
            level=bytes([int(level)]), name=f"xinfer/executor/{self.robot_id}",
            hardware_id=self.robot_id, message=text,
            values=[KeyValue(key=k, value=v) for k, v in values.items()]))
        found = self._strangers()
        if found:
            if found != self._warned_strangers:
                self.get_logger().warning("; ".join(found))
            diag.status.append(DiagnosticStatus(
                level=DiagnosticStatus.WARN, name=f"xinfer/executor/{self.robot_id}/publishers",
                hardware_id=self.robot_id, message="; ".join(found)))
        self._warned_strangers = found
        return diag


#: Core attributes the node exposes under their own names.
_CORE_FIELDS = frozenset({
    "halts", "seq", "requests_sent", "request_timeouts", "budget_ms", "budget_clamps",
    "server", "assigned", "server_switches", "horizon", "last_latency_ms",
    "watchdog_trips", "limit_stopped", "drops"})


def main(argv: list[str] | None = None) -> int:
    """Run the executor until SIGINT; return the exit status."""
    from xinfer_ros.nodes.runtime import spin_node

    return spin_node(RtcExecutor, argv)


if __name__ == "__main__":
    sys.exit(main())
