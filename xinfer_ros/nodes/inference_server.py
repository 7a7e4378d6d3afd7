"""The central inference server node.

For every robot on its allowlist it subscribes to ``<robot>/camera_{i}/image_raw`` (or
``.../compressed``), ``<robot>/joint_states`` and ``<robot>/policy_request``,
assembles each request's
observation (newest frames at or before the request stamp, within a maximum age),
validates it, submits it to the asynchronous stage engine under the configured
scheduling policy, and publishes exactly one ``<robot>/action_chunk`` per request, with
a status, a reason when not OK, the observation stamps used and per-stage timings.

Topic names are relative: in the server's namespace (``/`` by default, or a site's
prefix), robot ``r`` is ``<namespace>/r``. Server-wide it publishes
``xinfer/fleet_stats`` (1 Hz; ``xinfer/<server_name>/fleet_stats`` for a named server
among several) and ``/diagnostics``, and
serves ``~/get_fleet_stats`` and ``~/set_policy``. A malformed request never crashes
the server; a robot that falls silent for ``robot_timeout_s`` has its live requests
cancelled and its buffers freed.

A lifecycle node: parameters are validated and the model loaded at construction (a bad
one exits 2 at start-up); ``configure`` subscribes and advertises (inactive: requests are
answered REJECTED "server ... inactive"), ``activate`` serves, ``deactivate`` cancels the
live requests and lets no OK chunk out after it. ``autostart`` (default true) does both
at start. Per robot one request session is served (:mod:`xinfer_ros.serving.sessions`):
another sender's requests are answered REJECTED and supersede nothing.

With ``phase_spread`` the engine may hold an OK response that is ready later than
``T_E`` after its request arrived, never past the request's deadline less
``phase_spread_margin_ms``, so that its robot's next request lands in the widest gap
between the arrival phases of the other robots with tight budgets (at most ``T_E``;
:mod:`xinfer_ros.core.phase_spread`); the node publishes it at the result's release
time. The chunk's ``timing.hold_ms`` says how long it was held, and ``server_total_ms`` and
``budget_met`` count the hold. Responses within ``T_E`` and non-OK chunks are never
held.
"""

from __future__ import annotations

import array
import math
import os
import sys
import threading
import time
from collections.abc import Collection, Iterable
from contextlib import ExitStack
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from rclpy.callback_groups import CallbackGroup, MutuallyExclusiveCallbackGroup
from rclpy.event_handler import SubscriptionEventCallbacks
from rclpy.lifecycle import LifecycleState, TransitionCallbackReturn
from rclpy.node import Node
from rclpy.publisher import Publisher
from rclpy.qos import qos_profile_sensor_data
from rclpy.service import Service
from rclpy.subscription import Subscription
from rclpy.timer import Timer
from sensor_msgs.msg import CompressedImage, Image, JointState

from xinfer_ros.core.errors import BudgetError
from xinfer_ros.core.health import HealthLimits, robot_health
from xinfer_ros.core.metrics import ResponseRecord
from xinfer_ros.core.timing import MS_PER_S, budget_met, budget_seconds
from xinfer_ros.engine.api import Engine, EngineResult, RequestInputs
from xinfer_ros.fleet.assignment import SERVERS_TOPIC
from xinfer_ros.model.errors import InputError
from xinfer_ros.model.images import decode_image
from xinfer_ros.msg import (
    ActionChunk,
    FleetStats,
    PolicyRequest,
    RobotStats,
    ServerStatus,
    StageTiming,
)
from xinfer_ros.nodes.graph import publishing_nodes
from xinfer_ros.nodes.lifetime import LifecycleNode, destroyed_on_failure
from xinfer_ros.nodes.openpi_bridge import start_openpi_bridge
from xinfer_ros.nodes.params import declare_params, robot_names
from xinfer_ros.nodes.raw_image import RawImage
from xinfer_ros.serving.control import PolicySwitchError, policy_arguments
from xinfer_ros.serving.frontend import FlatChunk, camera_image, request_inputs
from xinfer_ros.serving.image_conversion import ImageConversionError, image_to_rgb
from xinfer_ros.serving.ledger import Outcome, ServingLedger, request_age
from xinfer_ros.serving.observations import (
    FrameBudgetError,
    NotObservedYetError,
    ObservationError,
    RobotObservations,
    joint_positions,
    stamp_seconds,
)
from xinfer_ros.serving.params import Params
from xinfer_ros.serving.presence import OwnPauses, silent_cameras
from xinfer_ros.serving.release import ReleaseScheduler
from xinfer_ros.serving.server_params import PARAMS, POLICIES
from xinfer_ros.serving.sessions import RequestSessions
from xinfer_ros.srv import GetFleetStats, SetPolicy

if TYPE_CHECKING:
    from xinfer_ros.model.presets import ModelIO

__all__ = ["PARAMS", "POLICIES", "InferenceServer", "main"]

#: Camera transports (image_transport's names): topic suffix, message class and type.
_TRANSPORT_TOPICS = {"raw": ("image_raw", Image, "sensor_msgs/msg/Image"),
                     "compressed": ("image_raw/compressed", CompressedImage,
                                    "sensor_msgs/msg/CompressedImage")}


# Sensor subscriptions go without rclpy's default event handlers (incompatible QoS,
# incompatible type): each is a waitable that a SingleThreadedExecutor re-adds to its
# wait set for every message, two per subscription. A best-effort volatile
# subscription accepts every publisher's QoS anyway; a publisher of the wrong type is
# reported by the periodic graph check instead (_check_graph).
_NO_EVENTS = SubscriptionEventCallbacks(use_default_callbacks=False)

#: A heartbeat lists the robots whose requests arrived this recently (s).
_SERVING_WINDOW_S = 2.0
# Period of the robot presence check.
_PRESENCE_PERIOD_S = 0.1

#: How each ``ActionChunk`` status counts in the statistics.
_OUTCOMES = {ActionChunk.STATUS_OK: Outcome.OK, ActionChunk.STATUS_SHED: Outcome.SHED,
             ActionChunk.STATUS_REJECTED: Outcome.FAILED, ActionChunk.STATUS_ERROR: Outcome.FAILED}


#: How a node destroys what configure created (a timer, a subscription, ...).
_DESTROY = {Timer: Node.destroy_timer, Subscription: Node.destroy_subscription,
            Publisher: Node.destroy_publisher, Service: Node.destroy_service}


@dataclass(frozen=True, slots=True)
class _Received:
    """A policy request as it arrived: the one place its budget becomes seconds.

    Attributes:
        robot: The robot's namespace.
        msg: The request message.
        arrival: Server monotonic time of arrival (s).
        budget: The budget (s); 0 when the message's ``budget_ms`` was refused, so a
            refused request counts as a miss and as a tight robot.
        budget_error: Why ``budget_ms`` was refused, or empty.
        age: The request's age at arrival, from its stamp (s); NaN when the clocks do
            not allow it (:func:`~xinfer_ros.serving.ledger.request_age`).
    """

    robot: str
    msg: PolicyRequest
    arrival: float
    budget: float
    budget_error: str = ""
    age: float = math.nan


@dataclass(frozen=True, slots=True)
class _Waiting:
    """A request waiting for a usable observation (``observation_wait_s``).

    Attributes:
        rx: The request.
        until: Monotonic time at which it is answered REJECTED if still waiting.
        reason: Why its observation is not usable yet (the reason it gets then).
    """

    rx: _Received
    until: float
    reason: str


class _RobotState:
    """Server-side state of one allowlisted robot."""

    def __init__(self, name: str, cameras: int, max_frame_bytes: int = 0) -> None:
        self.name = name
        self.obs: RobotObservations[RawImage, JointState] = RobotObservations(
            cameras, max_frame_bytes=max_frame_bytes)
        self.present = False
        #: Per camera: monotonic arrival of its latest frame, or of its subscription or
        #: of the robot's return, whichever is latest.
        self.frame_seen = [0.0] * cameras

    def heard(self, now: float) -> None:
        """A message of this robot arrived; one back from silence starts its cameras' clocks."""
        if not self.present:
            self.present = True
            self.frame_seen = [now] * len(self.frame_seen)


class InferenceServer(LifecycleNode):
    """The inference server; see the module docstring."""

    @destroyed_on_failure
    def __init__(self, engine: Engine | None = None, **kwargs: Any) -> None:
        super().__init__("inference_server", **kwargs)
        p = declare_params(self, PARAMS)
        self.params = p
        names = robot_names(p["robots"])
        self._robots = {name: _RobotState(name, p["cameras"], p["max_frame_bytes_per_robot"])
                        for name in names}
        #: What was answered, per robot: the statistics and diagnostics read it.
        self.ledger = ServingLedger(names)
        self._warned: set[object] = set()
        #: Unexpected publishers on each robot's topics, from the latest graph check.
        self._strangers: dict[str, list[str]] = {}
        #: The fleet attainment of the latest fleet_stats, for the heartbeat.
        self._attainment = math.nan
        # Phase spreading: the engine picks each result's release time; chunks held
        # past their ready time go out from the release thread.
        self._releases: ReleaseScheduler | None = None
        if p["phase_spread"]:
            self._releases = ReleaseScheduler("phase_spread_release",
                                              on_error=self._release_failed)
        self.io = self._model_io(p)
        self._joint_order = [n for n in p["joint_names"] if n]
        transports = list(p["image_transports"])
        if len(transports) not in (1, p["cameras"]):
            raise ValueError(f"parameter 'image_transports' has {len(transports)} entries; "
                             f"give one for all cameras or one per camera ({p['cameras']})")
        self._transports = transports * p["cameras"] if len(transports) == 1 else transports
        self.engine = engine if engine is not None else self._load_engine(p)
        self.engine.start()
        self._openpi = start_openpi_bridge(self)
        if self._openpi is not None:
            self._openpi.refuse(self._inactive_reason())
        #: The live session of each robot's requests (a second requester is refused).
        self.sessions = RequestSessions(p["robot_timeout_s"])
        #: Active: requests are served. Inactive: answered REJECTED "server inactive".
        self.serving = False
        self._chunk_pubs: dict[str, Publisher] = {}
        # What configure creates and cleanup destroys.
        self._entities: list[Timer | Subscription | Publisher | Service] = []
        self._camera_subs: dict[tuple[str, int], Subscription] = {}  # (robot, camera)
        #: Per robot, its request waiting for a usable observation (observation_wait_s);
        #: request, sensor and timer callbacks may run on different threads.
        self._waiting: dict[str, _Waiting] = {}
        self._waiting_lock = threading.Lock()
        self._sensor_types: dict[str, str] = {}  # sensor topic -> its only accepted type
        #: Prefix of this server's statistics topic and diagnostic names.
        self._scope = f"xinfer/{p['server_name']}" if p["server_name"] else "xinfer"
        mode = "EMULATED backend (timings from the rate table, placeholder actions)" \
            if getattr(self.engine.backend, "emulated", False) else f"{p['backend']} backend"
        spread = (f"on (margin {p['phase_spread_margin_ms']:g} ms)" if p["phase_spread"]
                  else "off")
        self._banner = (f"{len(names)} robots {names} with model {p['model']} on {mode}, "
                        f"policy {self.engine.policy.name}, "
                        f"batching {self.engine.batching()}, "
                        f"phase spreading {spread}")
        note = (self.engine.config.action_worker_note(p["torch.action_processes"])
                if p["backend"] == "torch" else None)
        if note:
            self.get_logger().warning(note)
        if p["autostart"]:
            self.trigger_configure()
            self.trigger_activate()
        else:
            self.get_logger().info(f"model loaded for {self._banner}; unconfigured: "
                                   "'ros2 lifecycle set <node> configure', then 'activate'")

    # -- lifecycle ----------------------------------------------------------------------
    def on_configure(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Subscribe, advertise and start the timers; requests are refused until activated."""
        self._declare_interfaces(self.params)
        self._start_timers(self.params)
        self.get_logger().info(f"configured for {self._banner}; inactive")
        return TransitionCallbackReturn.SUCCESS

    def on_activate(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Serve requests."""
        self.serving = True
        if self._openpi is not None:
            self._openpi.refuse("")
        self.get_logger().info(f"serving {self._banner}")
        return TransitionCallbackReturn.SUCCESS

    def on_deactivate(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Stop serving at once: live requests are answered, nothing OK goes out after."""
        self._stop_serving("deactivated")
        return TransitionCallbackReturn.SUCCESS

    def on_cleanup(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Back to unconfigured: subscriptions, publishers, timers and services go."""
        for entity in self._entities:
            destroy: Any = _DESTROY[type(entity)]
            destroy(self, entity)
        self._entities, self._chunk_pubs, self._camera_subs = [], {}, {}
        return TransitionCallbackReturn.SUCCESS

    def on_shutdown(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Stop serving on the way out."""
        self._stop_serving("shutting down")
        return TransitionCallbackReturn.SUCCESS

    def _stop_serving(self, why: str) -> None:
        if not self.serving:
            return
        self.serving = False
        if self._openpi is not None:
            self._openpi.refuse(self._inactive_reason())
        self._expire_waiting(time.monotonic(), self._robots, self._inactive_reason())
        # The engine answers each live request (SHED "cancelled: ...") at its next stage
        # boundary; a result ready before that goes out REJECTED (see _send).
        for robot in self._robots:
            self.engine.cancel(robot, f"server {why}")
        self.get_logger().info(f"{why}: live requests cancelled; requests are answered "
                               "REJECTED until activated")

    def _inactive_reason(self) -> str:
        """What a request to this server gets while it is not active (ROS and openpi)."""
        return (f"server {self.get_fully_qualified_name()} inactive: "
                "'ros2 lifecycle set' it to activate")

    def _declare_interfaces(self, p: Params) -> None:
        """Per robot its sensor and request subscriptions and chunk publisher; services."""
        sensors = MutuallyExclusiveCallbackGroup()
        requests = MutuallyExclusiveCallbackGroup()
        made = self._entities
        for name in self._robots:
            self._sensor_types[self.resolve_topic_name(f"{name}/joint_states")] = \
                "sensor_msgs/msg/JointState"
            for cam in range(p["cameras"]):
                topic, type_name = self._subscribe_camera(name, cam, sensors)
                self._sensor_types[self.resolve_topic_name(topic)] = type_name
            made.append(self.create_subscription(
                JointState, f"{name}/joint_states", lambda m, n=name: self._on_state(n, m),
                qos_profile_sensor_data, callback_group=sensors, event_callbacks=_NO_EVENTS))
            made.append(self.create_subscription(
                PolicyRequest, f"{name}/policy_request",
                lambda m, n=name: self._on_request(n, m), 50, callback_group=requests))
            self._chunk_pubs[name] = self.create_publisher(ActionChunk, f"{name}/action_chunk",
                                                           50)
            made.append(self._chunk_pubs[name])
        self._stats_pub = self.create_publisher(FleetStats, f"{self._scope}/fleet_stats", 10)
        self._diag_pub = self.create_publisher(DiagnosticArray, "/diagnostics", 10)
        made += [self._stats_pub, self._diag_pub,
                 self.create_service(GetFleetStats, "~/get_fleet_stats", self._srv_stats)]
        if p["allow_set_policy"]:
            made.append(self.create_service(SetPolicy, "~/set_policy", self._srv_policy))

    def _subscribe_camera(self, name: str, cam: int,
                          group: CallbackGroup) -> tuple[str, str]:
        """Subscribe to one camera of a robot (kept serialized); its topic and type name."""
        suffix, kind, type_name = _TRANSPORT_TOPICS[self._transports[cam]]
        topic = f"{name}/camera_{cam}/{suffix}"
        sub = self.create_subscription(
            kind, topic, lambda m, n=name, c=cam, k=kind: self._on_image(n, c, m, k),
            qos_profile_sensor_data, callback_group=group, event_callbacks=_NO_EVENTS,
            raw=True)
        self._entities.append(sub)
        self._camera_subs[(name, cam)] = sub
        self._robots[name].frame_seen[cam] = time.monotonic()
        return topic, type_name

    def _resubscribe_silent_cameras(self, now: float) -> None:
        """Subscribe afresh to cameras silent while their robot's other messages arrive."""
        after = self.params["camera_resubscribe_s"]
        for state in self._robots.values():
            for cam in silent_cameras(state.frame_seen, state.obs.last_seen, now, after):
                old = self._camera_subs[(state.name, cam)]
                self._entities.remove(old)
                self.destroy_subscription(old)
                self._subscribe_camera(state.name, cam, old.callback_group)
                self.get_logger().warning(
                    f"{state.name}: no camera_{cam} frame for {after:g} s while its other "
                    "messages arrive; subscribed to it afresh", throttle_duration_sec=10.0)

    # -- construction ------------------------------------------------------------------
    def _start_timers(self, p: Params) -> None:
        """Statistics (1 Hz), the heartbeat of a named server, presence, the graph."""
        made = self._entities
        made.append(self.create_timer(1.0, self._publish_stats))
        if p["server_name"]:
            self._status_pub = self.create_publisher(ServerStatus, SERVERS_TOPIC, 10)
            made += [self._status_pub, self.create_timer(p["heartbeat_period_s"],
                                                         self._announce)]
        # Lateness of the check up to max(3 periods, half the timeout) is a loaded
        # machine's and not compensated; a longer one is the server's own pause.
        # (Made anew at each configure: unconfigured time is no pause.)
        self._pauses = OwnPauses(_PRESENCE_PERIOD_S,
                                 max(3 * _PRESENCE_PERIOD_S, p["robot_timeout_s"] / 2))
        made.append(self.create_timer(_PRESENCE_PERIOD_S, self._check_presence))
        made.append(self.create_timer(5.0, self._check_graph))

    @staticmethod
    def _model_io(p: Params) -> ModelIO:
        """What the model takes, checked against ``cameras`` before any weight loads."""
        from xinfer_ros.model.presets import model_io

        try:
            io = model_io(p["model"], p["model_path"] or None)
        except FileNotFoundError as exc:
            raise ValueError(f"parameter 'model': {exc}") from None
        have = len(io.cameras)
        if p["cameras"] > have or (p["cameras"] < have and not io.masks_missing_cameras):
            allowed = f"1..{have}" if io.masks_missing_cameras else str(have)
            raise ValueError(f"parameter 'cameras'={p['cameras']} but model {p['model']!r} "
                             f"takes {allowed} cameras")
        return io

    def _load_engine(self, p: dict[str, Any]) -> Engine:
        """The engine of the parameters; says what loads first (minutes on a CPU)."""
        from xinfer_ros.engine.from_params import build_engine

        source = p["model_path"] or "no model_path"
        self.get_logger().info(f"loading model {p['model']} ({source}) on {p['device']} with "
                               f"the {p['backend']} backend ...")
        if p["backend"] == "torch" and not p["model_path"]:
            self.get_logger().warning(
                f"model {p['model']}: no model_path, so seeded RANDOM weights and identity "
                "normalisation: for tests and benchmarks, never for a real arm")
        return build_engine(p, self.io)

    def close(self) -> None:
        """Stop the openpi endpoint, the engine and the release thread.

        The runtime calls this on shutdown. Chunks still held then are published at
        once (early, never lost; nothing is sent once the context is shut down).
        """
        if self._openpi is not None:
            self._openpi.close()
        self.engine.close(drain_timeout=1.0)
        if self._releases is not None:
            self._releases.close(run_pending=True)
            held, held_s = self.ledger.held()
            mean = f", mean {held_s / held * 1e3:.1f} ms" if held else ""
            self.get_logger().info(f"phase spreading held {held} responses{mean}")

    def abandon(self) -> None:
        """Stop what a constructor that raised had started (see ``lifetime``).

        Each part is stopped even when stopping another fails. An engine passed to the
        constructor is the server's once taken: the server starts it, and closes it
        here or in :meth:`close`.
        """
        with ExitStack() as stack:  # runs last-in first: openpi, engine, releases
            releases: ReleaseScheduler | None = getattr(self, "_releases", None)
            if releases is not None:
                stack.callback(releases.close)
            engine: Engine | None = getattr(self, "engine", None)
            if engine is not None:
                stack.callback(engine.close, drain_timeout=0.0)
            openpi = getattr(self, "_openpi", None)
            if openpi is not None:
                stack.callback(openpi.close)

    # -- inputs -------------------------------------------------------------------------
    def _on_image(self, robot: str, camera: int, cdr: bytes, kind: type) -> None:
        # Kept serialized: only the frame a request picks is ever deserialized.
        try:
            frame = RawImage(cdr, kind)
        except ImageConversionError as exc:
            self.get_logger().warning(f"{robot}: camera_{camera} frame dropped: {exc}",
                                      throttle_duration_sec=5.0)
            return
        state = self._robots[robot]
        now = time.monotonic()
        state.heard(now)
        state.frame_seen[camera] = now
        try:
            state.obs.add_image(camera, frame, now, frame.stamp_s, frame.nbytes)
        except FrameBudgetError as exc:
            self.get_logger().warning(f"{robot}: {exc}", throttle_duration_sec=5.0)
        self._retry_waiting(robot)

    def _on_state(self, robot: str, msg: JointState) -> None:
        self._robots[robot].obs.add_state(msg, time.monotonic())
        self._robots[robot].heard(time.monotonic())
        self._retry_waiting(robot)

    def _on_request(self, robot: str, msg: PolicyRequest) -> None:
        arrival = time.monotonic()
        if msg.server and msg.server != self.params["server_name"]:
            return  # addressed to another server of the fleet
        stamp_ns = msg.header.stamp.sec * 1_000_000_000 + msg.header.stamp.nanosec
        age = request_age(self.get_clock().now().nanoseconds, stamp_ns,
                          self.params["max_clock_skew_s"])
        try:
            rx = _Received(robot, msg, arrival,
                           budget_seconds(msg.budget_ms, self.params["max_budget_ms"]), age=age)
        except BudgetError as exc:
            rx = _Received(robot, msg, arrival, 0.0, str(exc), age=age)
        state = self._robots[robot]
        state.obs.last_seen = arrival
        state.heard(arrival)
        if not self.serving:
            self._publish(rx, ActionChunk.STATUS_REJECTED, self._inactive_reason())
            return
        refused = self.sessions.admit(robot, msg.header.frame_id, stamp_ns, arrival)
        if refused:
            # Not the robot's own request: answered (a misconfigured second executor
            # learns why) but kept out of the robot's statistics.
            self._publish(rx, ActionChunk.STATUS_REJECTED, refused, record=False)
            self.get_logger().warning(f"{robot}: {refused}", throttle_duration_sec=5.0)
            return
        if (older := self._take_waiting(robot)) is not None:
            self._publish(older.rx, ActionChunk.STATUS_REJECTED,
                          f"superseded by a newer request while waiting: {older.reason}")
        # The wait is part of the budget: never longer than it.
        self._serve(rx, arrival + min(self.params["observation_wait_s"], rx.budget))

    def _serve(self, rx: _Received, wait_until: float) -> None:
        """Assemble and submit ``rx``; without a usable observation, wait for one.

        A request whose camera frame or joint state is missing or too old waits, until
        ``wait_until``, for the message that makes it whole (frames delivered late, e.g.
        after a stall or on a loaded machine): each arriving sensor message retries it.
        A newer request of the robot takes its place.
        """
        try:
            if rx.budget_error:
                raise ValueError(rx.budget_error)
            inputs, stamps = self._assemble(rx.robot, rx.msg)
        except NotObservedYetError as exc:
            # Only what the next sensor message may bring is waited for (not a refused
            # frame, a malformed one, or joint names the robot does not publish).
            if time.monotonic() >= wait_until:
                self._publish(rx, ActionChunk.STATUS_REJECTED, str(exc))
            else:
                self._wait(_Waiting(rx, wait_until, str(exc)))
            return
        except (ObservationError, ImageConversionError, InputError, ValueError) as exc:
            self._publish(rx, ActionChunk.STATUS_REJECTED, str(exc))
            return
        self.ledger.submitted(rx.robot)
        # The deadline counts from the arrival, not from the end of assembly.
        self.engine.submit(inputs, rx.budget, rx.robot,
                           callback=lambda r: self._on_result(rx, stamps, r),
                           age=time.monotonic() - rx.arrival)

    def _wait(self, waiting: _Waiting) -> None:
        robot = waiting.rx.robot
        with self._waiting_lock:
            refused: _Waiting | None
            if not self.serving:  # deactivated meanwhile
                refused, reason = waiting, self._inactive_reason()
            else:
                older = self._waiting.get(robot)
                # Of two waiting requests of a robot the later one stays.
                if older is not None and older.rx.arrival > waiting.rx.arrival:
                    refused = waiting
                else:
                    self._waiting[robot] = waiting
                    refused = older
                reason = ("superseded by a newer request while waiting: "
                          f"{refused.reason if refused else ''}")
        if refused is not None:
            self._publish(refused.rx, ActionChunk.STATUS_REJECTED, reason)

    def _take_waiting(self, robot: str) -> _Waiting | None:
        with self._waiting_lock:
            return self._waiting.pop(robot, None)

    def _retry_waiting(self, robot: str) -> None:
        """A sensor message arrived: serve the robot's waiting request if it is whole now."""
        if robot in self._waiting and (waiting := self._take_waiting(robot)) is not None:
            self._serve(waiting.rx, waiting.until)

    def _expire_waiting(self, now: float, robots: Collection[str] = (),
                        reason: str = "") -> None:
        """Answer REJECTED the waiting requests of ``robots``, or else those past their wait."""
        with self._waiting_lock:
            done = [w for name, w in self._waiting.items()
                    if name in robots or (not robots and now >= w.until)]
            for w in done:
                del self._waiting[w.rx.robot]
        for w in done:
            self._publish(w.rx, ActionChunk.STATUS_REJECTED, reason or w.reason)

    def _assemble(self, robot: str, msg: PolicyRequest) -> tuple[RequestInputs, Any]:
        stamps: list[Any] = []

        def observe() -> tuple[list[np.ndarray], list[float]]:
            frames, joint = self._robots[robot].obs.assemble(
                stamp_seconds(msg.header.stamp), self.params["max_observation_age_s"])
            messages = [frame.message() for frame in frames]
            stamps.extend(([m.header.stamp for m in messages], joint.header.stamp))
            return ([self._rgb(cam, frame, m)
                     for cam, (frame, m) in enumerate(zip(frames, messages, strict=True))],
                    joint_positions(joint.name, joint.position, self._joint_order))

        inputs = request_inputs(
            robot, msg.robot_id, msg.instruction, observe,
            prev=FlatChunk(msg.prev_chunk, msg.prev_horizon, msg.prev_action_dim,
                           msg.prev_shift),
            commit=msg.commit_steps, action_shape=self.engine.backend.action_shape,
            seed=int(msg.seq))
        return inputs, tuple(stamps)

    def _rgb(self, cam: int, frame: RawImage, msg: Image | CompressedImage) -> np.ndarray:
        """The frame as RGB at a size the model takes (see :func:`camera_image`)."""
        rgb = decode_image(bytes(msg.data), f"camera_{cam}") if frame.compressed \
            else image_to_rgb(msg)
        spec = self.io.cameras[cam]
        return camera_image(rgb, cam, (spec.height, spec.width),
                            strict=self.params["strict_image_size"],
                            resizes=self.io.resizes_images)

    # -- outputs ------------------------------------------------------------------------
    def _on_result(self, rx: _Received, stamps: Any, result: EngineResult) -> None:
        # The result is ready now; a hold counts from here, not from after the chunk
        # is built.
        ready = time.monotonic()
        self.ledger.answered(rx.robot)
        chunk = self._chunk(rx, int(result.status), result.reason)
        if result.actions is not None and int(result.status) == ActionChunk.STATUS_OK:
            chunk.horizon, chunk.action_dim = result.actions.shape
            # An array.array skips the generated setter's per-element checks.
            chunk.actions = array.array("f", np.asarray(result.actions, np.float32).tobytes())
        chunk.image_stamps, chunk.state_stamp = stamps
        t = result.timings
        # The message's queue time is every wait: in the ready queues and on the lanes.
        chunk.timing = StageTiming(
            queue_ms=_ms(t.queue_ms) + _ms(t.lane_ms), vit_ms=_ms(t.vit_ms),
            prefill_ms=_ms(t.prefill_ms), action_ms=_ms(t.action_ms), output_ms=_ms(t.output_ms),
            budget_ms=rx.msg.budget_ms)
        # Called on the engine's thread; a chunk the engine holds for phase spreading
        # goes out on the release thread at its release time.
        hold = result.hold_s
        if not (hold > 0 and self._releases is not None and self._releases.schedule(
                ready + hold, lambda: self._send(rx, chunk, ready=ready))):
            self._send(rx, chunk)

    def _release_failed(self, exc: BaseException) -> None:
        self.get_logger().error(f"held chunk not sent: {exc!r}")

    def _publish(self, rx: _Received, status: int, reason: str, *, record: bool = True) -> None:
        chunk = self._chunk(rx, status, reason)
        chunk.timing.budget_ms = rx.msg.budget_ms
        self._send(rx, chunk, record=record)

    def _chunk(self, rx: _Received, status: int, reason: str) -> ActionChunk:
        horizon, dim = self.engine.backend.action_shape
        return ActionChunk(robot_id=rx.robot, seq=rx.msg.seq, status=status, reason=reason,
                           horizon=horizon, action_dim=dim,
                           keyframe_spacing_s=rx.msg.keyframe_spacing_s,
                           commit_steps=rx.msg.commit_steps, server=self.params["server_name"])

    def _send(self, rx: _Received, chunk: ActionChunk, ready: float | None = None, *,
              record: bool = True) -> None:
        """Publish ``chunk`` now; ``ready`` is when a held chunk could have gone out.

        Once deactivated, no OK chunk goes out: one computed (or held) before is
        answered REJECTED instead. ``record`` false keeps it out of the statistics.
        """
        if not self.serving and chunk.status == ActionChunk.STATUS_OK:
            chunk.status, chunk.reason = ActionChunk.STATUS_REJECTED, "server inactive"
            chunk.actions = []
        now = time.monotonic()
        span = now - rx.arrival
        chunk.timing.server_total_ms = span * MS_PER_S
        hold = 0.0 if ready is None else max(0.0, now - ready)
        chunk.timing.hold_ms = hold * MS_PER_S
        chunk.timing.budget_met = bool(chunk.status == ActionChunk.STATUS_OK
                                       and budget_met(span, rx.budget))
        chunk.header.stamp = self.get_clock().now().to_msg()
        pub = self._chunk_pubs.get(rx.robot)
        if not self.context.ok() or pub is None:
            return  # shutting down or cleaned up: the engine drains results nobody gets
        pub.publish(chunk)
        if not record:
            return
        response = ResponseRecord(rx.arrival, time.monotonic(), rx.budget,
                                  ok=chunk.status == ActionChunk.STATUS_OK)
        self.ledger.record(rx.robot, response, _OUTCOMES[chunk.status], reason=chunk.reason,
                           hold_s=hold, age=rx.age)

    # -- presence and statistics --------------------------------------------------------
    def _check_presence(self) -> None:
        now = time.monotonic()
        paused = self._pauses.tick(now)
        if paused:
            # Silence counts only while the server ran: the robots' messages of the
            # pause are still queued in the transport.
            # Times set since the resume (callbacks that ran before this timer) stay.
            for state in self._robots.values():
                if state.obs.last_seen:
                    state.obs.last_seen = min(state.obs.last_seen + paused, now)
                state.frame_seen = [min(seen + paused, now) for seen in state.frame_seen]
            self.get_logger().warning(f"the server itself did not run for {paused:.2f} s; "
                                      "robots are judged silent from when it resumed")
        for state in self._robots.values():
            if state.present and now - state.obs.last_seen > self.params["robot_timeout_s"]:
                state.present = False
                self._expire_waiting(now, (state.name,), "robot went silent")
                state.obs.clear()
                self.sessions.forget(state.name)
                self.engine.cancel(state.name, "robot went silent")
                self.get_logger().warning(
                    f"{state.name}: no messages for {self.params['robot_timeout_s']} s; "
                    "its live requests are cancelled and its buffers freed")
        self._resubscribe_silent_cameras(now)
        self._expire_waiting(now)

    def _check_graph(self) -> None:
        """Warn about robots off the allowlist, sensor topics of a wrong type, strangers.

        Once per robot or topic; strangers on a served robot's topics also go to its
        /diagnostics while the graph shows them.
        """
        prefix = self.get_namespace().rstrip("/") + "/"
        self._strangers = {robot: found for robot in self._robots
                           if (found := self._robot_strangers(robot))}
        for topic, types in self.get_topic_names_and_types():
            if topic.endswith("/policy_request") and topic.startswith(prefix):
                robot = topic[len(prefix):].rsplit("/", 1)[0]
                if robot not in self._robots and robot not in self._warned:
                    self._warned.add(robot)
                    self.get_logger().warning(
                        f"ignoring robot {robot!r}: not on the allowlist {list(self._robots)}")
            expected = self._sensor_types.get(topic)
            if expected is not None and types != [expected] and topic not in self._warned:
                self._warned.add(topic)
                self.get_logger().warning(
                    f"topic {topic} carries {types}; the server receives only {expected}")

    def _robot_strangers(self, robot: str) -> list[str]:
        """Other nodes on ``robot``'s topics, one line each (empty: none).

        A second requester takes the robot's service away (a newer request supersedes
        the older), and a second server answering an unnamed one's robot answers twice.
        """
        requests = _names(publishing_nodes(self, self.resolve_topic_name(
            f"{robot}/policy_request")))
        me = self.get_fully_qualified_name()
        chunks = _names(n for n in publishing_nodes(self, self._chunk_pubs[robot].topic_name)
                        if n != me)
        found = []
        if len(requests) > 1:
            found.append(f"{len(requests)} publishers on policy_request, expected the "
                         f"robot's executor alone: {', '.join(requests)}")
        # Named servers share robots under a fleet manager; an unnamed one is the only one.
        if chunks and not self.params["server_name"]:
            found.append("another node publishes action_chunk (a second server answering "
                         f"this robot, or a stranger): {', '.join(chunks)}")
        for line in found:
            if (robot, line) not in self._warned:
                self._warned.add((robot, line))
                self.get_logger().warning(f"robot {robot}: {line}")
        return found

    def fleet_stats(self, window_s: float | None = None) -> FleetStats:
        """Statistics over the last ``window_s`` seconds of requests (by arrival)."""
        window_s = window_s or self.params["stats_window_s"]
        robots, total = self.ledger.summaries(time.monotonic(), window_s)
        out = FleetStats(policy=self.engine.policy.name, window_s=float(window_s),
                         robots=[RobotStats(**asdict(r)) for r in robots],
                         total=RobotStats(**asdict(total)))
        out.header.stamp = self.get_clock().now().to_msg()
        return out

    def _announce(self) -> None:
        """The heartbeat the fleet manager assigns robots by."""
        # Five times a second on the serving thread: no statistics are computed here.
        # The attainment is the latest fleet_stats' (1 Hz); the window of "serving" is
        # short, so that a robot that moved away lately is not claimed by two servers.
        msg = ServerStatus(server_name=self.params["server_name"],
                           capacity=self.params["capacity"], candidates=list(self._robots),
                           serving=self.ledger.active(time.monotonic(), _SERVING_WINDOW_S),
                           attainment=self._attainment,
                           accepting=bool(self.engine.running and self.serving))
        msg.header.stamp = self.get_clock().now().to_msg()
        self._status_pub.publish(msg)

    def _publish_stats(self) -> None:
        stats = self.fleet_stats()
        self._attainment = float(stats.total.attainment)
        self._stats_pub.publish(stats)
        diag = DiagnosticArray()
        diag.header.stamp = stats.header.stamp
        now = time.monotonic()
        p = self.params
        limits = HealthLimits(stale_after_s=p["diagnostics.stale_after_s"],
                              error_threshold=p["diagnostics.error_threshold"],
                              target=p["diagnostics.attainment_target"])
        for r in stats.robots:
            if self.params["server_name"] and not r.requests:
                continue  # one of several servers: it reports the robots it serves
            state = self._robots[r.robot_id]
            seen = state.obs.last_seen
            health = robot_health(now - seen if seen else math.inf, r.requests, r.errors,
                                  r.attainment, last_error=self.ledger.last_error(r.robot_id),
                                  limits=limits)
            diag.status.append(DiagnosticStatus(
                level=bytes([int(health.level)]), name=f"{self._scope}/robots/{r.robot_id}",
                hardware_id=r.robot_id, message=health.message,
                values=[KeyValue(key="request_rate_hz", value=f"{r.requests / stats.window_s:.2f}"),
                        KeyValue(key="attainment", value=f"{r.attainment:.4f}"),
                        KeyValue(key="errors", value=str(r.errors)),
                        KeyValue(key="shed", value=str(r.shed)),
                        KeyValue(key="queue_depth", value=str(r.queue_depth)),
                        KeyValue(key="latency_p99_ms", value=f"{r.latency_p99_ms:.1f}"),
                        KeyValue(key="request_age_p99_ms",
                                 value=f"{r.request_age_p99_ms:.1f}"),
                        KeyValue(key="frame_mib", value=f"{state.obs.frame_bytes / 2**20:.1f}"),
                        KeyValue(key="frames_refused", value=str(state.obs.frames_refused))]))
            if r.robot_id in self._strangers:
                diag.status.append(DiagnosticStatus(
                    level=DiagnosticStatus.WARN,
                    name=f"{self._scope}/robots/{r.robot_id}/publishers",
                    hardware_id=r.robot_id, message="; ".join(self._strangers[r.robot_id])))
        diag.status.append(self._server_status(stats))
        self._diag_pub.publish(diag)

    def _server_status(self, stats: FleetStats) -> DiagnosticStatus:
        """One entry for the server: what it serves, on what, how loaded."""
        backend = self.engine.backend
        # The frame store and its bound: the budget per robot times the robots.
        stores = [r.obs for r in self._robots.values()]
        budget = self.params["max_frame_bytes_per_robot"] * len(stores)
        values = {"model": self.params["model"], "model_path": self.params["model_path"],
                  "backend": self.params["backend"], "device": str(backend.device),
                  "policy": stats.policy, "batching": self.engine.batching(),
                  "queue_depth": str(stats.total.queue_depth),
                  "rss_mib": f"{_rss_bytes() / 2**20:.0f}",
                  "frame_store_mib": f"{sum(o.frame_bytes for o in stores) / 2**20:.1f}",
                  "frame_budget_mib": f"{budget / 2**20:.0f}",
                  "frames_refused": str(sum(o.frames_refused for o in stores))}
        if str(backend.device).startswith("cuda"):
            import torch

            values["cuda_allocated_mib"] = f"{torch.cuda.memory_allocated() / 2**20:.0f}"
        full = stats.total.queue_depth >= self.params["max_live_requests"]
        return DiagnosticStatus(
            level=DiagnosticStatus.WARN if full else DiagnosticStatus.OK,
            name=f"{self._scope}/server", hardware_id=self.get_fully_qualified_name(),
            message="at max_live_requests: new requests are shed" if full else "serving",
            values=[KeyValue(key=k, value=v) for k, v in values.items()])

    def _srv_stats(self, request: GetFleetStats.Request,
                   response: GetFleetStats.Response) -> GetFleetStats.Response:
        window = request.window_s if request.window_s > 0 else None
        response.stats = self.fleet_stats(window)
        return response

    def _srv_policy(self, request: SetPolicy.Request,
                    response: SetPolicy.Response) -> SetPolicy.Response:
        try:
            kwargs = policy_arguments(request.policy, request.parameter_names,
                                      request.parameter_values, POLICIES)
        except PolicySwitchError as exc:
            response.success = False
            response.message = str(exc)
            return response
        try:
            name = self.engine.set_policy(request.policy, **kwargs).result(timeout=5.0)
        except Exception as exc:  # the policy constructor's own error, reported as is
            response.success = False
            response.message = f"policy {request.policy!r} not switched: {exc}"
            return response
        response.success = True
        response.message = f"policy switched to {name}; live requests keep running"
        self.get_logger().info(response.message)
        return response


def _rss_bytes() -> int:
    """Resident memory of this process (Linux ``/proc``; 0 elsewhere)."""
    try:
        with open("/proc/self/statm", encoding="ascii") as handle:
            return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def _ms(value: float) -> float:
    return 0.0 if value is None or not math.isfinite(value) else float(value)


def _names(nodes: Iterable[str]) -> list[str]:
    """Node names sorted for a message ("<unnamed>" where the graph gave none)."""
    return sorted(n or "<unnamed>" for n in nodes)


def main(argv: list[str] | None = None) -> int:
    """Run the server until SIGINT; return the exit status."""
    from xinfer_ros.nodes.runtime import spin_node

    return spin_node(InferenceServer, argv)


if __name__ == "__main__":
    sys.exit(main())
