"""The RTC executor of one robot without ROS: what the node and the tests drive.

The node (:mod:`xinfer_ros.nodes.rtc_executor`) turns messages into calls and the
returned values into messages; everything it decides lives here:

- **Send timing** (:class:`xinfer_ros.rtc.request_cycle.RequestCycle`). At most one
  request in flight; the next goes out at ``max(s_j + T_E, r_j)`` (Eq. 1). A request
  unanswered for ``request_timeout_s`` is abandoned and the next goes out at once, as
  it does when a server (re)appears after a request went out unheard.
- **Assignment.** With a fleet manager requests go to the assigned server only; a
  switch abandons the request in flight and resends at once; nothing is sent while no
  server is assigned.
- **Lifecycle.** ``inactive``: nothing commanded and nothing requested; ``active``:
  requesting and commanding. :meth:`ExecutorCore.deactivate` stops commands at once
  and forgets the queue.
- **Hold and halt.** When the queue runs dry the last command is held for
  ``hold_timeout_s``, then commands stop until a chunk arrives.
- **Chunk sanity** (:class:`DropReason`): a chunk is applied only if it answers the
  request in flight, from the server that request went to, with observation stamps no
  older than the request's stamp minus ``max_observation_age_s`` and no later than
  the stamp plus ``max_clock_skew_s``, and every action finite and within the
  position bounds; otherwise it is dropped and counted by reason.
- **The gate** (:mod:`xinfer_ros.rtc.command_gate`): engage ramp and limits on every
  command.
- **Wall-clock watchdog.** :meth:`ExecutorCore.check_watchdog`, called from a
  wall-clock timer, stops commands when the control tick has not run for
  ``watchdog_ticks × Δ``.

Times: ``now`` arguments are monotonic (wall) seconds; stamps are the robot clock's
seconds (the clock of the request and observation stamps).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import Enum, IntEnum

import numpy as np
import numpy.typing as npt

from xinfer_ros.errors import XInferRosError
from xinfer_ros.rtc.command_gate import CommandGate, LimitAction
from xinfer_ros.rtc.limits import CommandLimits
from xinfer_ros.rtc.request_cycle import RequestCycle
from xinfer_ros.rtc.send_lag import SendLagStats
from xinfer_ros.rtc.smoothness import SpliceSmoothness
from xinfer_ros.rtc.splice import ActionQueue, SpliceError

__all__ = [
    "STARTUP_MODES",
    "Chunk",
    "ChunkStatus",
    "DropReason",
    "ExecutorConfig",
    "ExecutorCore",
    "Level",
    "Lifecycle",
    "Request",
    "strangers",
]

FloatArray = npt.NDArray[np.float64]
#: Startup behaviours before the first chunk.
STARTUP_MODES = ("silent", "hold_state")


class Lifecycle(str, Enum):
    """The executor's managed state (ROS 2 managed nodes' primary states)."""

    UNCONFIGURED = "unconfigured"
    INACTIVE = "inactive"
    ACTIVE = "active"


class Level(IntEnum):
    """Severity of the executor's status (the values of diagnostic_msgs levels)."""

    OK = 0
    WARN = 1
    ERROR = 2


class ChunkStatus(IntEnum):
    """An ActionChunk's status (the message's constants)."""

    OK = 0
    REJECTED = 1
    SHED = 2
    ERROR = 3


class DropReason(str, Enum):
    """Why a chunk was not applied."""

    OTHER_ROBOT = "other_robot"  #: robot_id of another robot
    FOREIGN_SERVER = "foreign_server"  #: not from the server the request went to
    NOT_IN_FLIGHT = "not_in_flight"  #: answers no request in flight (replay, forgery)
    NON_OK = "non_ok"  #: status REJECTED, SHED or ERROR
    INACTIVE = "inactive"  #: arrived while the executor was inactive
    MALFORMED = "malformed"  #: wrong shape or horizon
    NON_FINITE = "non_finite"  #: NaN or Inf in the actions
    OUT_OF_LIMITS = "out_of_limits"  #: an action outside the position bounds
    STALE_OBSERVATION = "stale_observation"  #: a stamp older than send - max age
    FUTURE_OBSERVATION = "future_observation"  #: a stamp later than send + skew


class ExecutorError(XInferRosError, ValueError):
    """Executor settings that contradict each other."""


@dataclass(frozen=True)
class ExecutorConfig:
    """Settings of one executor (the node's parameters).

    Attributes:
        robot_id: The robot's name in requests and chunks.
        spacing: Control tick Δ (s).
        action_dim: Joints D.
        commit: RTC frozen prefix d.
        min_period: Minimum request period T_E (s).
        request_timeout: Abandon a request unanswered this long (s).
        hold_timeout: Hold the last command this long once the queue runs dry (s).
        fixed_horizon: H every chunk must have (0: any, at least ``commit``).
        startup: ``silent`` or ``hold_state`` before the first chunk.
        managed: Requests go to an assigned server (a fleet manager runs).
        budget_range: Accepted budget range (ms).
        default_budget_ms: Budget until one arrives (ms).
        limits: Joint limits.
        limit_action: Clamp or stop on a broken limit.
        engage_ramp: Engage blend (s).
        max_observation_age: Oldest observation stamp a chunk may carry, before the
            request's stamp (s).
        max_clock_skew: Latest observation stamp, after the request's stamp (s).
        watchdog_ticks: Stop commanding when no tick ran for this many Δ of wall time.
        server_respawn: A dead server is restarted (the launch's ``respawn``): the
            status says the executor waits for it.
    """

    robot_id: str
    action_dim: int
    spacing: float = 0.03
    commit: int = 8
    min_period: float = 0.18
    request_timeout: float = 1.0
    hold_timeout: float = 1.0
    fixed_horizon: int = 0
    startup: str = "silent"
    managed: bool = False
    budget_range: tuple[float, float] = (1.0, 1000.0)
    default_budget_ms: float = 400.0
    limits: CommandLimits | None = None
    limit_action: LimitAction = LimitAction.CLAMP
    engage_ramp: float = 1.0
    max_observation_age: float = 0.5
    max_clock_skew: float = 0.1
    watchdog_ticks: float = 2.0
    server_respawn: bool = False

    def __post_init__(self) -> None:
        if self.fixed_horizon and self.commit > self.fixed_horizon:
            raise ExecutorError(f"commit_steps {self.commit} exceeds horizon "
                                f"{self.fixed_horizon}")
        low, high = self.budget_range
        if low > high:
            raise ExecutorError(f"parameter 'min_budget_ms'={low} exceeds "
                                f"'max_budget_ms'={high}")
        if self.startup not in STARTUP_MODES:
            raise ExecutorError(f"startup must be one of {list(STARTUP_MODES)}")
        if self.limits is not None and self.limits.dim != self.action_dim:
            raise ExecutorError(f"limits for {self.limits.dim} joints, action_dim "
                                f"{self.action_dim}")


@dataclass(frozen=True)
class Request:
    """A request to send: the node turns it into a PolicyRequest.

    Attributes:
        seq: Its sequence number.
        send_tick: The tick it is sent at (keyframe 0 of its answer).
        stamp: Its stamp on the robot clock (s).
        budget_ms: The budget it carries (ms).
        prev_chunk: The aligned previous chunk ``(H, D)`` (``None``: no RTC constraint).
        server: The server it is for ("": any).
        prev_shift: s of Eq. 5: rows of ``prev_chunk`` past the queued keyframes are
            padding (the last command repeated), not a plan.
    """

    seq: int
    send_tick: int
    stamp: float
    budget_ms: float
    prev_chunk: FloatArray | None
    server: str
    prev_shift: int = 0


@dataclass(frozen=True)
class Chunk:
    """An ActionChunk as the core checks it.

    Attributes:
        robot_id: The robot it answers.
        seq: The seq of the request it answers.
        server: The server that answered.
        status: Its :class:`ChunkStatus`.
        reason: Why, when not OK.
        horizon: H.
        action_dim: D.
        actions: Row-major ``H × D`` actions.
        stamps: Observation stamps (robot clock, s): cameras, then the joint state.
    """

    robot_id: str
    seq: int
    server: str = ""
    status: int = ChunkStatus.OK
    reason: str = ""
    horizon: int = 0
    action_dim: int = 0
    actions: Sequence[float] | FloatArray = ()
    stamps: tuple[float, ...] = ()


@dataclass
class _InFlight:
    seq: int
    send_tick: int
    sent: float  # monotonic
    stamp: float  # robot clock
    server: str
    unheard: bool  # no server was listening when it went out
    miss_counted: bool = False


#: Receives a log line and its severity (``Level.OK``: information).
Log = Callable[[Level, str], None]


def _no_log(level: Level, text: str) -> None:  # pragma: no cover - default sink
    del level, text


@dataclass
class ExecutorCore:
    """The executor's state and decisions; see the module docstring.

    Args:
        config: The settings.
        t0: Monotonic time of tick 0 (s).
        log: Receives the executor's log lines with their severity.
    """

    config: ExecutorConfig
    t0: float
    log: Log = _no_log
    state: Lifecycle = field(default=Lifecycle.INACTIVE, init=False)

    def __post_init__(self) -> None:
        c = self.config
        self.queue = ActionQueue(c.action_dim)
        self.smoothness = SpliceSmoothness(c.action_dim)
        self.limits = c.limits or CommandLimits.none(c.action_dim)
        self.gate = CommandGate(self.limits, c.spacing, c.engage_ramp, c.limit_action)
        self.send_lag = SendLagStats()
        self.drops: Counter[DropReason] = Counter()
        #: H of the chunks being executed (0 until one arrives with no fixed H).
        self.horizon = c.fixed_horizon
        self.budget_ms = self.clamp_budget(c.default_budget_ms)
        self.budget_clamps = 0
        self.seq = 0
        self.requests_sent = 0
        self.request_timeouts = 0
        self.last_latency_ms = math.nan
        self.server = ""
        self.assigned = not c.managed
        self.unassigned_why = "waiting for the fleet assignment"
        self.server_switches = 0
        self.halts = 0
        self.watchdog_trips = 0
        #: The watchdog found the control tick stalled (cleared by the next tick).
        self.watchdog_tripped = False
        #: A broken limit stopped commands (``limit_action: stop``; cleared on activation).
        self.limit_stopped = False
        self.activations = 0
        self.cycle = RequestCycle(c.min_period, c.request_timeout)
        self._in_flight: _InFlight | None = None
        self._eq1_due = False
        self._tick = 0
        self._last_tick_at: float | None = None
        self._dry_since: float | None = None
        self._measured: FloatArray | None = None
        self._reset_commanding()

    def _reset_commanding(self) -> None:
        #: A chunk was applied since the activation (before it, see ``startup``).
        self.started = False
        #: Commands are being sent now.
        self.commanding = False

    # -- lifecycle ----------------------------------------------------------------------
    @property
    def active(self) -> bool:
        """Whether the executor requests and commands."""
        return self.state == Lifecycle.ACTIVE

    def activate(self, now: float) -> None:
        """Start requesting; commands follow the first chunk, through the engage ramp."""
        if self.active:
            return
        self.state = Lifecycle.ACTIVE
        self.activations += 1
        self.limit_stopped = False
        self._reset_commanding()
        self._abandon(now)
        self._last_tick_at = now
        self._tick = max(self._tick, self.tick_at(now) + 1)
        self.log(Level.OK, f"activated: requesting chunks for {self.config.robot_id}")

    def deactivate(self) -> None:
        """Stop commands at once, abandon the request in flight, forget the queue."""
        if not self.active:
            return
        self.state = Lifecycle.INACTIVE
        self._reset_commanding()
        # The next request's time is set again on activation.
        self._abandon(self.cycle.next_send)
        self._dry_since = None
        self.queue.clear()
        self.log(Level.OK, "deactivated: commands stopped")

    # -- inputs -------------------------------------------------------------------------
    def tick_at(self, now: float) -> int:
        """The keyframe tick of monotonic time ``now``."""
        return int((now - self.t0) / self.config.spacing)

    @property
    def next_tick(self) -> int:
        """The next tick to execute."""
        return self._tick

    @property
    def next_send_at(self) -> float:
        """When the next request is due (monotonic s)."""
        return self.cycle.next_send

    @property
    def in_flight_seq(self) -> int | None:
        """The seq of the request in flight (``None``: none)."""
        return None if self._in_flight is None else self._in_flight.seq

    def measure(self, positions: FloatArray) -> None:
        """The robot's measured joint positions (joint_states), in the model's order."""
        self._measured = np.asarray(positions, dtype=np.float64).copy()

    @property
    def measured(self) -> FloatArray | None:
        """The latest measured joint positions (``None`` before any)."""
        return None if self._measured is None else self._measured.copy()

    def clamp_budget(self, budget_ms: float) -> float:
        """``budget_ms`` within the accepted range."""
        low, high = self.config.budget_range
        return min(max(budget_ms, low), high)

    def set_budget(self, budget_ms: float) -> str | None:
        """Take a budget from the controller; return a warning when it was changed."""
        if not math.isfinite(budget_ms) or budget_ms <= 0:
            self.budget_clamps += 1
            return f"ignoring budget {budget_ms} ms (must be > 0)"
        budget = self.clamp_budget(budget_ms)
        self.budget_ms = budget
        if budget != budget_ms:
            self.budget_clamps += 1
            low, high = self.config.budget_range
            return (f"budget {budget_ms:g} ms outside [{low:g}, {high:g}] ms; sending "
                    f"{budget:g} ms")
        return None

    def assign(self, server: str, why: str, now: float) -> bool:
        """Take the fleet manager's assignment; return whether it changed.

        A change abandons the request in flight (its answer is never applied) and makes
        the next request due at once.
        """
        if server == self.server and self.assigned == bool(server):
            self.unassigned_why = "" if server else why
            return False
        if self.server and server:
            self.server_switches += 1
        self.server, self.assigned = server, bool(server)
        self.unassigned_why = "" if server else why
        self._abandon(now)
        return True

    def _abandon(self, now: float) -> None:
        """Forget the request in flight (its answer is never applied); next due at ``now``."""
        self._in_flight = None
        self.cycle.abandon(now)
        self._eq1_due = False

    # -- the control tick ---------------------------------------------------------------
    def tick(self, now: float) -> FloatArray | None:
        """Run the control tick at ``now``; return the command to send (``None``: none).

        Ticks a busy node missed are executed at once, so keyframes stay on the grid.
        """
        self._last_tick_at = now
        if self.watchdog_tripped:
            self.watchdog_tripped = False
            self.log(Level.OK, "control tick running again")
        target = self.tick_at(now)
        if not self.active:
            self._tick = max(self._tick, target + 1)
            return None
        if not self.started:
            self._tick = max(self._tick, target + 1)
            if self.config.startup == "hold_state" and self._measured is not None:
                self.gate.hold(self._measured)
                return self._measured.copy()
            return None
        command, starved = None, False
        while self._tick <= target:
            command, starved = self.queue.pop(self._tick)
            self.smoothness.record(command, None if starved else self.queue.origin_tick)
            self._tick += 1
        if command is None:
            return None
        self._hold_or_halt(now, starved)
        if not self.commanding:
            return None
        step = self.gate.step(command)
        if step.command is None:
            self._stop_on_limit(step.broken)
        return step.command

    def _stop_on_limit(self, broken: tuple[str, ...]) -> None:
        self.commanding = False
        self.limit_stopped = True
        self.log(Level.ERROR, f"command breaks the {', '.join(broken)} limit: commands "
                 "stopped (limit_action stop) until the executor is activated again")

    def _hold_or_halt(self, now: float, starved: bool) -> None:
        """Hold the last command for ``hold_timeout_s`` of an empty queue, then stop."""
        if not starved:
            self._dry_since = None
            return
        if self._dry_since is None:
            self._dry_since = now
        if self.commanding and now - self._dry_since > self.config.hold_timeout:
            self.commanding = False
            self.halts += 1
            self.log(Level.ERROR,
                     f"no new chunk for {now - self._dry_since:.2f} s after the queue ran "
                     "dry: commands stopped (the controller holds) until a chunk arrives")

    def check_watchdog(self, now: float) -> bool:
        """From a wall-clock timer: stop commands if the tick stalled; return whether it is.

        The tick stalled when it has not run for ``watchdog_ticks × Δ`` (a node clock
        that stopped: ``use_sim_time`` without ``/clock``).
        """
        if not self.active or self._last_tick_at is None:
            return False
        stalled = now - self._last_tick_at > self.config.watchdog_ticks * self.config.spacing
        if stalled and not self.watchdog_tripped:
            self.watchdog_tripped = True
            self.watchdog_trips += 1
            if self.commanding:
                self.commanding = False
            self.log(Level.ERROR, f"control tick stalled for {now - self._last_tick_at:.2f} "
                     "s of wall time (node clock stopped? use_sim_time without /clock): "
                     "commands stopped")
        return stalled

    # -- requests -----------------------------------------------------------------------
    def poll_send(self, now: float, stamp: float,
                  server_present: Callable[[], bool]) -> Request | None:
        """The request to send now, if one is due (it is then in flight).

        Args:
            now: Monotonic time (s).
            stamp: The robot clock now (s): the request's stamp.
            server_present: Whether a server publishes this robot's chunks; asked only
                when a request is due or one in flight went unheard (a graph query per
                control tick costs the node more than the tick itself).
        """
        if not self.active:
            return None
        flight = self._in_flight
        if flight is not None:
            if not flight.miss_counted and now > flight.sent + self.config.min_period:
                self.queue.record_trigger_miss()
                flight.miss_counted = True
            # A server that (re)appeared never saw the request in flight: resend now
            # rather than wait for the timeout.
            reappeared = flight.unheard and server_present()
            if not self.cycle.expired(now) and not reappeared:
                return None
            if reappeared:
                self.log(Level.OK, f"server appeared; resending request {flight.seq}")
            else:
                self.request_timeouts += 1
                self.log(Level.WARN, f"request {flight.seq} unanswered after "
                         f"{self.config.request_timeout:.2f} s; holding and resending")
            self._abandon(now)
        if not self.cycle.due(now) or not self.assigned:
            return None
        if self._eq1_due:
            self.send_lag.record(now - self.cycle.next_send)
            self._eq1_due = False
        return self._send(now, stamp, server_present())

    def _send(self, now: float, stamp: float, server_present: bool) -> Request:
        self.seq += 1
        tick = self._tick
        prev = self.queue.planned(tick, self.horizon) \
            if self.requests_sent > 0 and self.horizon and self.started else None
        self.requests_sent += 1
        self._in_flight = _InFlight(self.seq, tick, now, stamp, self.server,
                                    unheard=not server_present)
        self.cycle.sent(self.seq, now)
        shift = self.horizon - min(self.horizon, self.queue.remaining(tick)) \
            if prev is not None else 0
        return Request(self.seq, tick, stamp, self.budget_ms, prev, self.server,
                       prev_shift=shift)

    # -- chunks -------------------------------------------------------------------------
    def on_chunk(self, chunk: Chunk, now: float) -> DropReason | None:
        """Check a chunk and splice it; return why it was dropped (``None``: applied)."""
        reason, why = self._check(chunk, now)
        if reason is not None:
            self.drops[reason] += 1
            if why:
                self.log(Level.WARN, why)
        return reason

    def _check(self, chunk: Chunk, now: float) -> tuple[DropReason | None, str]:
        if chunk.robot_id != self.config.robot_id:
            return DropReason.OTHER_ROBOT, ""
        flight = self._in_flight
        if self.config.managed and chunk.server != self.server:
            return DropReason.FOREIGN_SERVER, ""  # a late answer of a server it left
        if not self.active:
            return DropReason.INACTIVE, ""
        if flight is None or chunk.seq != flight.seq:
            return DropReason.NOT_IN_FLIGHT, ""  # abandoned request or replay
        if flight.server and chunk.server != flight.server:
            return DropReason.FOREIGN_SERVER, ""
        if chunk.status != ChunkStatus.OK:
            self._answered(flight, now)
            return DropReason.NON_OK, f"request {flight.seq}: status {chunk.status}: " \
                f"{chunk.reason}"
        # The checks below do not end the request in flight: a forged chunk with its
        # seq must not take the real answer's place.
        try:
            actions = self._actions(chunk)
        except ValueError as exc:
            return DropReason.MALFORMED, f"request {flight.seq}: unusable chunk: {exc}"
        if not np.all(np.isfinite(actions)):
            return DropReason.NON_FINITE, f"request {flight.seq}: chunk has NaN or Inf"
        stamp_reason = self._check_stamps(chunk.stamps, flight)
        if stamp_reason is not None:
            return stamp_reason
        if not self.limits.within_positions(actions):
            return DropReason.OUT_OF_LIMITS, (
                f"request {flight.seq}: chunk leaves the position bounds; dropped")
        self._answered(flight, now)
        try:
            self.queue.splice(actions, flight.send_tick, max(self._tick, flight.send_tick),
                              self.config.commit)
        except SpliceError as exc:
            return DropReason.MALFORMED, f"request {flight.seq}: unusable chunk: {exc}"
        self.horizon = chunk.horizon
        if not self.commanding and not self.limit_stopped:
            self.log(Level.OK, "chunk received: commanding the robot")
            self.commanding = True
            self.gate.engage(self._measured)
        self.started = True
        self._dry_since = None
        return None, ""

    def _answered(self, flight: _InFlight, now: float) -> None:
        """The request in flight got its answer at ``now``: Eq. 1 schedules the next."""
        self.last_latency_ms = (now - flight.sent) * 1e3
        self._in_flight = None
        self.cycle.answered(now)
        self._eq1_due = True

    def _actions(self, chunk: Chunk) -> FloatArray:
        """The chunk's actions as ``(H, D)`` (raises ``ValueError``)."""
        c = self.config
        if c.fixed_horizon and chunk.horizon != c.fixed_horizon:
            raise ValueError(f"chunk has H={chunk.horizon}; parameter horizon requires "
                             f"{c.fixed_horizon}")
        if chunk.horizon < c.commit or chunk.horizon == 0:
            raise ValueError(f"chunk has H={chunk.horizon}, shorter than commit_steps "
                             f"{c.commit}")
        if chunk.action_dim != c.action_dim:
            raise ValueError(f"chunk has D={chunk.action_dim}, the robot {c.action_dim}")
        return np.asarray(chunk.actions, dtype=np.float64).reshape(chunk.horizon,
                                                                   chunk.action_dim)

    def _check_stamps(self, stamps: tuple[float, ...],
                      flight: _InFlight) -> tuple[DropReason, str] | None:
        c = self.config
        if not stamps:
            return DropReason.STALE_OBSERVATION, (
                f"request {flight.seq}: chunk names no observation stamps; dropped")
        oldest, newest = min(stamps), max(stamps)
        if oldest < flight.stamp - c.max_observation_age:
            return DropReason.STALE_OBSERVATION, (
                f"request {flight.seq}: chunk used an observation "
                f"{flight.stamp - oldest:.3f} s older than the request "
                f"(max_observation_age_s {c.max_observation_age:g}); dropped")
        if newest > flight.stamp + c.max_clock_skew:
            return DropReason.FUTURE_OBSERVATION, (
                f"request {flight.seq}: chunk used an observation stamped "
                f"{newest - flight.stamp:.3f} s after the request (max_clock_skew_s "
                f"{c.max_clock_skew:g}); dropped")
        return None

    # -- outputs ------------------------------------------------------------------------
    def trajectory(self) -> FloatArray | None:
        """The queued keyframes from the next tick on, through the gate (``None``: none).

        Nothing when not commanding or when a keyframe would be refused.
        """
        if not self.commanding:
            return None
        remaining = self.queue.remaining(self._tick)
        if not remaining:
            return None
        return self.gate.preview(self.queue.planned(self._tick, remaining))

    def status(self, server_present: bool = True) -> tuple[Level, str]:
        """The executor's state for ``/diagnostics``: severity and one line.

        Args:
            server_present: A server publishes this robot's chunks (the graph says).
        """
        c = self.config
        if self.watchdog_tripped:
            return Level.ERROR, ("control tick stalled (node clock stopped? use_sim_time "
                                 "without /clock): commands stopped")
        if self.limit_stopped:
            return Level.ERROR, (f"command broke the {', '.join(self.gate.last_broken)} "
                                 "limit: commands stopped until activated again")
        if not self.active:
            return Level.WARN, "inactive: nothing commanded (activate to command)"
        if not self.assigned:
            return Level.WARN, f"not served: {self.unassigned_why}"
        if self.in_flight_seq is not None and not server_present:
            stopped = self.started and not self.commanding
            return (Level.ERROR if stopped else Level.WARN), (
                "no inference server publishes action_chunk"
                + (", waiting for the launch to restart it (respawn)" if c.server_respawn
                   else "") + (": commands stopped" if stopped else ""))
        if not self.started:
            return Level.WARN, f"waiting for the first chunk ({c.startup})"
        if not self.commanding:
            return Level.ERROR, f"no chunk for over {c.hold_timeout:g} s: commands stopped"
        if self._dry_since is not None:
            return Level.WARN, "action queue empty: holding the last command"
        if self.gate.engaging:
            return Level.OK, "engaging: blending from the measured state"
        return Level.OK, "commanding"


def strangers(me: str, request_publishers: Sequence[str],
              chunk_publishers: Sequence[str], servers: int = 1) -> list[str]:
    """Warnings about publishers on a robot's topics that should not be there.

    Only the robot's own executor publishes its ``policy_request``; at most ``servers``
    nodes (one without a fleet manager) publish its ``action_chunk``. Anyone else can
    take the robot's service away or drive it (chunk sanity drops what it can tell).

    Args:
        me: This executor's fully qualified node name.
        request_publishers: Fully qualified names of the nodes publishing
            ``policy_request`` (empty names: the graph did not say).
        chunk_publishers: The same for ``action_chunk``.
        servers: How many servers may answer this robot.

    Returns:
        One line per problem (empty: none).
    """
    out: list[str] = []
    others = [n or "<unnamed>" for n in request_publishers if n != me]
    if others:
        out.append(f"unexpected publisher(s) on policy_request: {', '.join(sorted(others))}")
    if len(chunk_publishers) > servers:
        names = ", ".join(sorted(n or "<unnamed>" for n in chunk_publishers))
        out.append(f"{len(chunk_publishers)} publishers on action_chunk, expected at most "
                   f"{servers} (two servers answering, or a stranger): {names}")
    return out
