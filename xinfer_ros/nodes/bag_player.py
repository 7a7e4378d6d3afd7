"""Replays a fleet bag's robot inputs into an inference server and collects its answers.

The player acts as every recorded robot at once: it publishes the recorded camera
frames, joint states and budgets on the recorded schedule (log times, scaled by a rate
factor) and sends the recorded policy requests either

* **open loop**: at their recorded times, unchanged (same stamps, so the server picks
  the same observations; same seq, so a seeded model draws the same noise), or
* **closed loop**: like a robot's executor, request ``j+1`` at
  ``max(s_j + T_E, r_j)`` (Eq. 1) with ``r_j`` the new server's answer, carrying the
  budget in force at that point of the recording (the ``budget`` topic; the request's
  own budget where none was recorded) and a stamp on the recording's time line.

A plain robot bag (:mod:`xinfer_ros.bags.mapping`) recorded no requests: its robots are
replayed closed loop with requests made up here, seq 1, 2, ... (the seed), the budget
in force (the mapped budget topic, else a named workload pattern, else a fixed budget)
and no previous chunk, so that every chunk depends only on its observations and seq
and a second run with the same model reproduces it exactly. Their camera frames and
joint states are published on the fleet's names.

Every ``action_chunk`` the server publishes is kept with its receive time. Every wait is
bounded; the caller's ``stop`` callable can end a replay at any time.
"""

from __future__ import annotations

import functools
import heapq
import math
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from rclpy.publisher import Publisher
from rclpy.qos import QoSProfile, ReliabilityPolicy, qos_profile_sensor_data
from rclpy.serialization import deserialize_message, serialize_message
from rclpy.time import Time

from xinfer_ros.bags.reader import BagMessage
from xinfer_ros.bags.scan import RecordedChunk, RecordedRequest, RecordedRun, chunk_from_msg
from xinfer_ros.bags.types import BagTopic, Role, TopicKind
from xinfer_ros.core.constants import SEND_PERIOD
from xinfer_ros.core.timing import MS_PER_S
from xinfer_ros.msg import ActionChunk, PolicyRequest
from xinfer_ros.nodes.lifetime import destroyed_on_failure
from xinfer_ros.nodes.qos import LATCHED_QOS
from xinfer_ros.nodes.recorder import message_class
from xinfer_ros.rtc.request_cycle import RequestCycle

__all__ = ["MODES", "BagPlayer", "PlayConfig", "PlayResult", "SentRequest", "play_bag"]

MODES = ("open", "closed")
#: Seq numbers of probe requests; far above any executor's count, below 2**32 so that
#: any seeding scheme accepts them.
PROBE_SEQ = 2**31
#: Longest single sleep of the play loop, which bounds the reaction to ``stop``.
_SLICE_S = 0.02


@dataclass(frozen=True)
class PlayConfig:
    """How to replay.

    Attributes:
        mode: ``open`` (recorded request times) or ``closed`` (Eq. 1).
        rate: Playback speed factor (2.0 plays twice as fast).
        period_s: Closed loop: minimum request period ``T_E`` in recorded time (s).
        request_timeout_s: Closed loop: a request unanswered this long is abandoned.
        response_timeout_s: After the last message, wait this long for answers.
        lead_s: Delay between the start call and the first message.
        budget_ms: Made-up requests: the budget when no budget topic was mapped.
        budget_pattern: Made-up requests: a workload of :mod:`xinfer_ros.sim.workloads`
            whose per-robot budget sequence they follow (wins over ``budget_ms``).
        instruction: Made-up requests: the task instruction.
    """

    mode: str = "open"
    rate: float = 1.0
    period_s: float = SEND_PERIOD
    request_timeout_s: float = 1.0
    response_timeout_s: float = 3.0
    lead_s: float = 0.3
    budget_ms: float | None = None
    budget_pattern: str | None = None
    instruction: str = ""

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"mode {self.mode!r} is not one of {list(MODES)}")
        if not self.rate > 0:
            raise ValueError(f"rate must be > 0, got {self.rate}")
        if self.budget_ms is not None and not 0 < self.budget_ms < float("inf"):
            raise ValueError(f"budget_ms must be > 0, got {self.budget_ms}")


@dataclass(frozen=True)
class SentRequest:
    """A request as the player sent it.

    Attributes:
        seq: Sequence number.
        send_ns: Wall-clock send time, ns.
        budget_ms: Budget it carried.
        bag_ns: The point of the recording's time line it was sent at, ns.
        data: Its CDR bytes (for a golden bag).
    """

    seq: int
    send_ns: int
    budget_ms: float
    bag_ns: int
    data: bytes = b""


@dataclass
class PlayResult:
    """What a replay sent and received.

    Attributes:
        sent: Per robot, the requests in send order.
        chunks: Per robot, the first answer to each seq.
        published: Messages published per topic kind.
        max_lag_s: Largest delay of a publication behind its schedule.
        lags_s: Every recorded message's delay behind its schedule, in publish order
            (the player never skips a late message: it publishes it late).
        stopped: Whether ``stop`` ended the replay early.
        duplicates: Answers to a seq already answered (ignored).
    """

    sent: dict[str, list[SentRequest]] = field(default_factory=dict)
    chunks: dict[str, dict[int, RecordedChunk]] = field(default_factory=dict)
    published: Counter[str] = field(default_factory=Counter)
    max_lag_s: float = 0.0
    lags_s: list[float] = field(default_factory=list)
    stopped: bool = False
    duplicates: int = 0


@dataclass
class _Robot:
    """Closed-loop executor state of one robot."""

    pending: list[RecordedRequest]
    cycle: RequestCycle  # in flight, Eq. 1 and timeout on the monotonic clock
    template: RecordedRequest | None = None
    next_seq: int = 0
    answered: int = 0  # responses so far: a budget pattern advances with them

    def take(self) -> RecordedRequest:
        """The next request to send: the next recorded one, then copies of the last.

        A faster server runs out of recorded requests before the recording ends; the
        robot keeps sending at its Eq. 1 pace with fresh seq numbers, as it would live.
        A robot that recorded none gets a fresh seq with no message (``data`` empty):
        the player makes the request up.
        """
        if not self.pending and self.template is None:
            self.next_seq = max(self.next_seq, 1)
            seq, self.next_seq = self.next_seq, self.next_seq + 1
            return RecordedRequest(seq, 0, 0, float("nan"), b"")
        if self.pending:
            self.template = self.pending.pop(0)
            self.next_seq = max(self.next_seq, self.template.seq + 1)
            return self.template
        assert self.template is not None
        seq, self.next_seq = self.next_seq, self.next_seq + 1
        return RecordedRequest(seq, self.template.stamp_ns, self.template.log_ns,
                               self.template.budget_ms, self.template.data)


def _publisher_qos(topic: BagTopic) -> QoSProfile:
    if topic.kind in (TopicKind.IMAGE, TopicKind.STATE):
        return qos_profile_sensor_data
    if topic.kind == TopicKind.BUDGET:
        return LATCHED_QOS
    return QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE)


def _for_this_server(data: bytes) -> bytes:
    """A recorded request addressed to no server in particular.

    A bag recorded from a fleet of several servers has each request addressed to one of
    them by name; the replay's server would ignore those not addressed to it.
    """
    msg = deserialize_message(data, PolicyRequest)
    if not msg.server:
        return data
    msg.server = ""
    return serialize_message(msg)


class BagPlayer(Node):
    """Publishes a recorded run's inputs and collects the answers.

    Args:
        run: The scanned bag.
        config: Replay settings.
    """

    @destroyed_on_failure
    def __init__(self, run: RecordedRun, config: PlayConfig) -> None:
        super().__init__("xinfer_replay")
        self.run = run
        self.config = config
        self.result = PlayResult(sent={r: [] for r in run.robots},
                                 chunks={r: {} for r in run.robots})
        self._probes: dict[tuple[str, int], RecordedChunk] = {}
        self._probe_seq = PROBE_SEQ
        self._lock = threading.Lock()
        self._answered = threading.Event()
        self._inputs = {name: t for name, t in run.topics.items()
                        if t.role == Role.INPUT and t.robot in run.robots and t.replayed}
        self._pubs: dict[str, Publisher] = {
            name: self.create_publisher(message_class(t.msgtype), t.target, _publisher_qos(t))
            for name, t in self._inputs.items()}
        self._budgets = _budget_schedules(run, config)
        # Request publishers of robots whose bag had none (plain sensor bags).
        for robot in run.robots:
            topic = f"/{robot}/policy_request"
            if topic not in self._pubs:
                self._pubs[topic] = self.create_publisher(
                    PolicyRequest, topic, QoSProfile(depth=100,
                                                     reliability=ReliabilityPolicy.RELIABLE))
        for robot in run.robots:
            self.create_subscription(ActionChunk, f"/{robot}/action_chunk",
                                     lambda m, r=robot: self._on_chunk(r, m),
                                     QoSProfile(depth=200, reliability=ReliabilityPolicy.RELIABLE))

    # -- answers ------------------------------------------------------------------------
    def _on_chunk(self, robot: str, msg: ActionChunk) -> None:
        chunk = chunk_from_msg(msg, time.time_ns(), serialize_message(msg))
        with self._lock:
            if chunk.seq >= PROBE_SEQ:
                self._probes[(robot, chunk.seq)] = chunk
                self._answered.set()
                return
            answers = self.result.chunks[robot]
            if chunk.seq in answers:
                self.result.duplicates += 1
            else:
                answers[chunk.seq] = chunk
        self._answered.set()

    def _answer(self, robot: str, seq: int) -> RecordedChunk | None:
        with self._lock:
            return self.result.chunks[robot].get(seq)

    def outstanding(self) -> int:
        """Sent requests without an answer yet."""
        with self._lock:
            return sum(1 for robot, sent in self.result.sent.items() for s in sent
                       if s.seq not in self.result.chunks[robot])

    # -- connection ---------------------------------------------------------------------
    def unmatched(self, kinds: tuple[TopicKind, ...]) -> list[str]:
        """Topics of ``kinds`` whose server side is not connected yet.

        ``TopicKind.CHUNK`` stands for the server's ``action_chunk`` publishers.
        """
        missing = [t.target for name, t in self._inputs.items()
                   if t.kind in kinds and self._pubs[name].get_subscription_count() == 0]
        if TopicKind.REQUEST in kinds:
            missing += [topic for topic in (f"/{r}/policy_request" for r, t
                                            in self.run.robots.items() if t.synthetic)
                        if self._pubs[topic].get_subscription_count() == 0]
        if TopicKind.CHUNK in kinds:
            missing += [f"/{r}/action_chunk" for r in self.run.robots
                        if self.count_publishers(f"/{r}/action_chunk") == 0]
        return missing

    def wait_for_server(self, timeout_s: float, alive: Callable[[], bool],
                        sensor_grace_s: float = 3.0) -> tuple[list[str], list[str]]:
        """Wait until the server takes the requests and answers, then for its sensors.

        Requests and answers must connect within ``timeout_s``. Camera and joint-state
        topics get ``sensor_grace_s`` more: a server with fewer cameras than the bag
        never subscribes to the extra ones, which is worth a warning, not a failure.

        Returns:
            Unconnected required topics (empty on success; ``["server exited"]`` when
            ``alive()`` turned false), and unconnected sensor topics.
        """
        required = (TopicKind.REQUEST, TopicKind.CHUNK)
        sensors = (TopicKind.IMAGE, TopicKind.STATE)
        end = time.monotonic() + timeout_s
        while self.unmatched(required):
            if not alive():
                return ["server exited"], []
            if time.monotonic() >= end:
                return self.unmatched(required), []
            time.sleep(0.1)
        end = time.monotonic() + sensor_grace_s
        while self.unmatched(sensors) and time.monotonic() < end and alive():
            time.sleep(0.1)
        return [], self.unmatched(sensors)

    def probe(self, timeout_s: float, alive: Callable[[], bool]) -> list[str]:
        """Make sure the server receives this player's frames before the replay starts.

        Discovery is not symmetric: our writers may list the server's readers while the
        server has not accepted our writers yet, and it drops what they send until it
        has. Per robot, the bag's first frame of every camera and first joint state are
        published, then a probe request (seq at or above :data:`PROBE_SEQ`, never a
        recorded one) stamped at them; an answer other than "not received" proves the
        path. The probe also warms the model up. Robots without a complete set of
        streams are not probed (their requests are rejected anyway).

        Returns:
            Robots whose probe never succeeded within ``timeout_s``.
        """
        pending = {name for name, t in self.run.robots.items() if t.context_ns is not None}
        end = time.monotonic() + timeout_s
        while pending and time.monotonic() < end and alive():
            sent = {name: self._send_probe(name) for name in sorted(pending)}
            wait_end = min(end, time.monotonic() + 2.0)
            while time.monotonic() < wait_end and any(
                    (n, q) not in self._probes for n, q in sent.items()):
                self._answered.wait(_SLICE_S)
                self._answered.clear()
            for name, seq in sent.items():
                answer = self._probes.get((name, seq))
                if answer is not None and "received yet" not in answer.reason:
                    pending.discard(name)
        return sorted(pending)

    def _send_probe(self, robot: str) -> int:
        track = self.run.robots[robot]
        for topic, (_, data) in track.first_inputs.items():
            self._pubs[topic].publish(data)
        stamp = max(s for s, _ in track.first_inputs.values())
        msg = (self._made_up(robot, 0, 0) if track.synthetic
               else deserialize_message(track.replayable[0].data, PolicyRequest))
        with self._lock:
            seq, self._probe_seq = self._probe_seq, self._probe_seq + 1
        msg.seq, msg.server = seq, ""
        msg.header.stamp = Time(nanoseconds=stamp).to_msg()
        msg.prev_chunk, msg.prev_horizon, msg.prev_action_dim = [], 0, 0
        self._pubs[f"/{robot}/policy_request"].publish(msg)
        return seq

    # -- playback -----------------------------------------------------------------------
    def _wait_until(self, due: float, stop: Callable[[], bool]) -> bool:
        """Sleep until the monotonic time ``due``; False when ``stop()`` interrupted."""
        while (left := due - time.monotonic()) > 0:
            if stop():
                return False
            self._answered.wait(min(left, _SLICE_S))
            self._answered.clear()
        return True

    def _stream(self) -> Iterator[BagMessage]:
        ordinals: Counter[str] = Counter()
        for msg in self.run.source.messages(set(self._inputs)):
            ordinal = ordinals[msg.topic]
            ordinals[msg.topic] += 1
            if (msg.topic, ordinal) not in self.run.bad:
                yield msg

    def _due(self, t0: float, log_ns: int) -> float:
        return t0 + (log_ns - self.run.start_ns) / 1e9 / self.config.rate

    def _bag_time_ns(self, t0: float, now: float) -> int:
        return self.run.start_ns + int((now - t0) * self.config.rate * 1e9)

    def _publish_input(self, msg: BagMessage, lag: float) -> None:
        self._pubs[msg.topic].publish(msg.data)
        self.result.published[self._inputs[msg.topic].kind.value] += 1
        self._lagged(lag)

    def _lagged(self, lag: float) -> None:
        self.result.lags_s.append(lag)
        self.result.max_lag_s = max(self.result.max_lag_s, lag)

    def _send(self, robot: str, request: RecordedRequest, msg: PolicyRequest | bytes,
              bag_ns: int) -> None:
        budget = request.budget_ms if isinstance(msg, bytes) else float(msg.budget_ms)
        data = msg if isinstance(msg, bytes) else serialize_message(msg)
        with self._lock:
            self.result.sent[robot].append(
                SentRequest(request.seq, time.time_ns(), budget, bag_ns, data))
        self._pubs[f"/{robot}/policy_request"].publish(msg)
        self.result.published[TopicKind.REQUEST.value] += 1

    def play(self, stop: Callable[[], bool]) -> PlayResult:
        """Replay the bag (blocking; spin the node in another thread meanwhile).

        Args:
            stop: Polled while waiting; true ends the replay early.

        Returns:
            What was sent and received (also kept in :attr:`result`).
        """
        t0 = time.monotonic() + self.config.lead_s
        if self.config.mode == "open":
            self._play_open(t0, stop)
        else:
            self._play_closed(t0, stop)
        end = time.monotonic() + self.config.response_timeout_s
        while self.outstanding() and time.monotonic() < end and not stop():
            self._answered.wait(_SLICE_S)
            self._answered.clear()
        self.result.stopped = self.result.stopped or stop()
        return self.result

    def _play_open(self, t0: float, stop: Callable[[], bool]) -> None:
        # Sensor messages from the bag and the replayable requests (the bag's own, or a
        # golden bag's) merged on the recording's time line; a request goes out after
        # the sensor messages logged at the same instant.
        inputs: Iterator[tuple[int, int, BagMessage | None, str, RecordedRequest | None]] = (
            (m.timestamp, 0, m, "", None) for m in self._stream()
            if self._inputs[m.topic].kind != TopicKind.REQUEST)
        requests = sorted(((q.log_ns, 1, None, robot, q) for robot, track in
                           self.run.robots.items() for q in track.replayable),
                          key=lambda e: (e[0], e[3]))
        for log_ns, _, message, robot, request in heapq.merge(inputs, requests,
                                                               key=lambda e: e[:2]):
            due = self._due(t0, log_ns)
            if not self._wait_until(due, stop):
                self.result.stopped = True
                return
            if message is not None:
                self._publish_input(message, time.monotonic() - due)
            elif request is not None:
                self._send(robot, request, _for_this_server(request.data), request.log_ns)
                self._lagged(time.monotonic() - due)

    def _play_closed(self, t0: float, stop: Callable[[], bool]) -> None:
        period = self.config.period_s / self.config.rate
        robots = {name: _Robot(list(track.replayable), RequestCycle(
                      period, self.config.request_timeout_s,
                      next_send=self._due(t0, self._first_send_ns(name))))
                  for name, track in self.run.robots.items()}
        stream = self._stream()
        upcoming = next(stream, None)
        bag_end = self._due(t0, self.run.end_ns)
        while not stop():
            now = time.monotonic()
            while upcoming is not None and self._due(t0, upcoming.timestamp) <= now:
                if self._inputs[upcoming.topic].kind != TopicKind.REQUEST:
                    self._publish_input(upcoming, now - self._due(t0, upcoming.timestamp))
                upcoming = next(stream, None)
            wake = [self._due(t0, upcoming.timestamp)] if upcoming is not None else []
            for name, state in robots.items():
                self._step_robot(name, state, t0, now, bag_end)
                if now < bag_end:
                    wake.append(state.cycle.next_send if state.cycle.in_flight is None
                                else now + _SLICE_S)
            if upcoming is None and now >= bag_end:
                return
            due = min(wake) if wake else now + _SLICE_S
            self._answered.wait(max(0.0, min(due - time.monotonic(), _SLICE_S)))
            self._answered.clear()
        self.result.stopped = True

    def _step_robot(self, name: str, state: _Robot, t0: float, now: float,
                    bag_end: float) -> None:
        cycle = state.cycle
        if cycle.in_flight is not None:
            answer = self._answer(name, cycle.in_flight.seq)
            if answer is not None:
                # Eq. 1 with r_j the receipt of this answer on the monotonic clock.
                cycle.answered(now - max(0.0, time.time_ns() - answer.log_ns) / 1e9)
                state.answered += 1
            elif cycle.expired(now):
                cycle.abandon(now)
        if cycle.due(now) and now < bag_end:
            request = state.take()
            bag_ns = self._bag_time_ns(t0, now)
            if request.data:
                msg = deserialize_message(request.data, PolicyRequest)
                msg.seq, msg.server = request.seq, ""
            else:
                msg = self._made_up(name, request.seq, state.answered)
            # The stamp is on the robot's clock, as its sensor stamps: the server picks
            # frames by comparing them.
            msg.header.stamp = Time(
                nanoseconds=bag_ns + self.run.robots[name].clock_offset_ns).to_msg()
            budget = self.run.robots[name].budget_at(bag_ns)
            if budget is not None:
                msg.budget_ms = budget
            self._send(name, request, msg, bag_ns)
            cycle.sent(request.seq, now)

    def _first_send_ns(self, robot: str) -> int:
        """A robot's first send on the recording's time line.

        Its first recorded request; for a robot without requests, once all its streams
        have started and, when only its budget topic says its budget, once that has.
        """
        track = self.run.robots[robot]
        if track.replayable:
            return track.replayable[0].log_ns
        start = track.context_ns or self.run.start_ns
        if track.budgets and math.isnan(self._budgets.get(robot, _no_budget)(0)):
            start = max(start, track.budgets[0][0])
        return start

    def _made_up(self, robot: str, seq: int, answered: int) -> PolicyRequest:
        """A request of a robot whose bag recorded none (see the module docstring)."""
        budget_ms = self._budgets[robot](answered) if robot in self._budgets else math.nan
        return PolicyRequest(robot_id=robot, seq=seq, budget_ms=budget_ms,
                             instruction=self.config.instruction, commit_steps=0,
                             keyframe_spacing_s=0.0)


def _budget_schedules(run: RecordedRun, config: PlayConfig) -> dict[str, Callable[[int], float]]:
    """Per robot without recorded requests: the budget (ms) of its k-th made-up request.

    A recorded budget topic overrides these at send time (``budget_at``).
    """
    robots = sorted(name for name, t in run.robots.items() if t.synthetic)
    if not robots:
        return {}
    if config.budget_pattern:
        from xinfer_ros.sim.workloads import build_workload

        specs = build_workload(config.budget_pattern, len(robots), seed=0).robots
        return {name: functools.partial(_in_ms, spec.budgets)
                for name, spec in zip(robots, specs, strict=True)}
    fixed = config.budget_ms if config.budget_ms is not None else math.nan
    return dict.fromkeys(robots, functools.partial(_fixed, fixed))


def _no_budget(_k: int) -> float:
    return math.nan


def _in_ms(budgets: Callable[[int], float], k: int) -> float:
    return budgets(k) * MS_PER_S


def _fixed(value: float, _k: int) -> float:
    return value


def play_bag(run: RecordedRun, config: PlayConfig, *, server_alive: Callable[[], bool],
             stop: Callable[[], bool], server_timeout: float,
             probe_timeout: float) -> tuple[PlayResult, str | None]:
    """Wait for a server, probe it, and replay ``run`` into it (rclpy initialised).

    Args:
        run: The scanned bag.
        config: Playback settings.
        server_alive: False once the server process died (True for one already running).
        stop: True once the user asked to stop.
        server_timeout: Longest wait for the server to connect (s).
        probe_timeout: Longest wait for probe requests to be served (s).

    Returns:
        The player's result and an error text, or ``None`` when the replay ran.
    """
    player = BagPlayer(run, config)
    executor = SingleThreadedExecutor()
    executor.add_node(player)
    spinner = threading.Thread(target=executor.spin, daemon=True)
    spinner.start()
    try:
        def alive() -> bool:
            return server_alive() and not stop()

        missing, sensors = player.wait_for_server(server_timeout, alive)
        if missing:
            return player.result, ("server not connected within "
                                   f"{server_timeout:g} s: {', '.join(missing[:6])}")
        if sensors:
            run.warnings.append(f"the server does not subscribe to {len(sensors)} recorded "
                                f"input topic(s): {', '.join(sensors[:6])}")
        if silent := player.probe(probe_timeout, alive):
            run.warnings.append(f"probe requests of {silent} were not served; their first "
                                "replayed requests may be rejected")
        print(f"server connected; replaying {run.duration_s:.1f} s of recording "
              f"({config.mode} loop, rate {config.rate:g})")
        # The whole replay is bounded: the recording's length at this rate, plus margins.
        limit = time.monotonic() + run.duration_s / config.rate + \
            config.response_timeout_s + 30.0

        def stop_or_expired() -> bool:
            return stop() or time.monotonic() > limit or not server_alive()

        result = player.play(stop_or_expired)
        if not server_alive():
            return result, "the server exited during the replay"
        return result, None
    finally:
        executor.shutdown()
        spinner.join(timeout=2.0)
        player.destroy_node()
