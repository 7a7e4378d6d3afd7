"""First pass over a fleet bag: what can be replayed, and what was recorded.

:func:`scan_bag` reads a bag once, decodes every fleet message with the rosbags
typestore (pure Python: a corrupt message raises instead of crashing anything), and
keeps the small messages the replay needs in memory: per robot the requests, the
recorded chunks and the budget timeline. Images and joint states stay in the bag; the
player streams them in a second pass and skips the messages this pass marked bad.
Topics of other tools, unknown types and topics of the wrong type are reported and
ignored. ROS-free.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

import numpy as np
import numpy.typing as npt
from rosbags.typesys.store import Typestore

from xinfer_ros.bags.mapping import TopicMapping
from xinfer_ros.bags.reader import BagError, BagSource, open_bag
from xinfer_ros.bags.schema import Definition, TypeChange, plan_translations
from xinfer_ros.bags.types import BagTopic, TopicKind, classify_topic, make_typestore

__all__ = [
    "RecordedChunk",
    "RecordedRequest",
    "RecordedRun",
    "RobotTrack",
    "TimeStamp",
    "cdr_header_stamp_ns",
    "scan_bag",
    "stamp_ns",
]


#: Sensor messages per robot whose stamp-to-log offset estimates its clock offset.
_OFFSET_SAMPLES = 2000


def cdr_header_stamp_ns(data: bytes) -> int | None:
    """The header stamp (ns) of a CDR message whose first field is ``std_msgs/Header``.

    Read from the bytes without decoding the message (the recorder keeps messages
    serialized). None when ``data`` is too short or not plain CDR.
    """
    if len(data) < 12 or data[0] != 0 or data[1] not in (0, 1):
        return None
    order: Literal["little", "big"] = "little" if data[1] == 1 else "big"
    sec = int.from_bytes(data[4:8], order, signed=True)
    nanosec = int.from_bytes(data[8:12], order)
    return sec * 1_000_000_000 + nanosec


class TimeStamp(Protocol):
    """A builtin_interfaces/Time as rosbags and rclpy both give it."""

    @property
    def sec(self) -> int:
        """Whole seconds."""

    @property
    def nanosec(self) -> int:
        """Nanoseconds past ``sec``."""


def stamp_ns(stamp: TimeStamp) -> int:
    """A builtin_interfaces/Time (rosbags or rclpy) as integer nanoseconds."""
    return int(stamp.sec) * 1_000_000_000 + int(stamp.nanosec)


@dataclass(frozen=True)
class RecordedRequest:
    """A policy_request of the bag.

    Attributes:
        seq: Request sequence number.
        stamp_ns: Header stamp (robot send time), ns.
        log_ns: Receive time at the recorder, ns.
        budget_ms: The budget it carried.
        data: Its CDR bytes.
    """

    seq: int
    stamp_ns: int
    log_ns: int
    budget_ms: float
    data: bytes


@dataclass(frozen=True)
class RecordedChunk:
    """An action_chunk of the bag (or of a replay).

    Attributes:
        seq: Sequence number of the request it answers.
        log_ns: Receive time, ns.
        status: ActionChunk status code.
        reason: Non-OK reason.
        actions: ``horizon x action_dim`` float32 actions (empty unless OK).
        image_stamps: Stamps (ns) of the frames the server used.
        state_stamp: Stamp (ns) of the joint state it used.
        server_total_ms: The server's own span.
        data: Its CDR bytes where kept (a replay's answers, for a golden bag).
    """

    seq: int
    log_ns: int
    status: int
    reason: str
    actions: npt.NDArray[np.float32]
    image_stamps: tuple[int, ...]
    state_stamp: int
    server_total_ms: float
    data: bytes = b""

    @property
    def observations(self) -> tuple[tuple[int, ...], int]:
        """The observation stamps; equal stamps mean the same inputs."""
        return self.image_stamps, self.state_stamp


def chunk_from_msg(msg: Any, log_ns: int, data: bytes = b"") -> RecordedChunk:
    """A :class:`RecordedChunk` from an ActionChunk (rosbags or rclpy message)."""
    actions = np.asarray(msg.actions, dtype=np.float32)
    if actions.size and actions.size == int(msg.horizon) * int(msg.action_dim):
        actions = actions.reshape(int(msg.horizon), int(msg.action_dim))
    return RecordedChunk(
        seq=int(msg.seq), log_ns=log_ns, status=int(msg.status), reason=str(msg.reason),
        actions=actions, image_stamps=tuple(stamp_ns(s) for s in msg.image_stamps),
        state_stamp=stamp_ns(msg.state_stamp),
        server_total_ms=float(msg.timing.server_total_ms), data=data)


@dataclass
class RobotTrack:
    """What the bag holds for one robot.

    Attributes:
        name: Robot namespace.
        cameras: Camera indices with an image topic.
        has_state: Whether joint_states was recorded.
        requests: policy_request messages in log order.
        chunks: Recorded chunks by request seq (first answer kept).
        budgets: ``(log_ns, budget_ms)`` of the budget topic, in order.
        counts: Readable messages per topic kind.
        first_input_ns: Per camera/joint-state topic, the log time of its first message.
        first_inputs: Per camera/joint-state topic, the header stamp (ns) and CDR bytes
            of its first message (the player primes a server with them).
        synthetic: A robot of a plain sensor bag: it recorded no requests, so a closed
            loop replay makes them up (:mod:`xinfer_ros.bags.mapping`).
        stamp_offsets: Header stamp less log time of the first sensor messages (ns): the
            robot's clock against the recorder's, less each message's delay.
    """

    name: str
    cameras: set[int] = field(default_factory=set)
    has_state: bool = False
    requests: list[RecordedRequest] = field(default_factory=list)
    chunks: dict[int, RecordedChunk] = field(default_factory=dict)
    budgets: list[tuple[int, float]] = field(default_factory=list)
    counts: Counter[str] = field(default_factory=Counter)
    first_input_ns: dict[str, int] = field(default_factory=dict)
    first_inputs: dict[str, tuple[int, bytes]] = field(default_factory=dict)
    synthetic: bool = False
    stamp_offsets: list[int] = field(default_factory=list)

    @property
    def clock_offset_ns(self) -> int:
        """The robot's clock less the recorder's, from its sensor messages (0 when none).

        Each message's header stamp less its log time is that offset less the message's
        delay (exposure, transport); the 95th percentile takes the least-delayed
        messages and is robust to a few outliers. A replay that makes up request stamps
        puts them on the robot's clock with it, so the server picks the frames the
        robot's own request would have.
        """
        if not self.stamp_offsets:
            return 0
        return int(np.percentile(np.asarray(self.stamp_offsets, dtype=np.int64), 95))

    @property
    def context_ns(self) -> int | None:
        """When every camera and the joint state had sent a first message, ns.

        ``None`` when a stream is missing altogether: no request of this robot can be
        served then, and all are replayed to show it.
        """
        if not self.cameras or not self.has_state:
            return None
        return max(self.first_input_ns.values())

    @property
    def replayable(self) -> list[RecordedRequest]:
        """Requests sent once the robot's observations had all started.

        A recording starts in the middle of a run: requests before the first frame of
        some camera were answered from frames the bag does not hold, so no replay can
        serve them; they are left out of the replay and of both sides of the report.
        """
        start = self.context_ns
        return self.requests if start is None else [q for q in self.requests
                                                     if q.log_ns >= start]

    def budget_at(self, log_ns: int) -> float | None:
        """The budget in force at ``log_ns`` (the latest one received by then)."""
        current = None
        for t, budget in self.budgets:
            if t > log_ns:
                break
            current = budget
        return current


@dataclass
class RecordedRun:
    """The result of :func:`scan_bag`.

    Attributes:
        source: The open bag (the player reads it again).
        robots: Replayable robots (with at least one request) by name.
        topics: Fleet topics used, by name.
        start_ns: Earliest log time of a used message.
        end_ns: Latest log time of a used message.
        bad: ``(topic, ordinal)`` of messages that did not decode; the player skips them.
        warnings: Notes for the report.
        schema_changes: Types the bag recorded with another definition (mapped by
            field name into this build's).
    """

    source: BagSource
    robots: dict[str, RobotTrack]
    topics: dict[str, BagTopic]
    start_ns: int
    end_ns: int
    bad: set[tuple[str, int]] = field(default_factory=set)
    warnings: list[str] = field(default_factory=list)
    schema_changes: list[TypeChange] = field(default_factory=list)

    @property
    def skipped(self) -> dict[str, int]:
        """Undecodable messages per topic."""
        return dict(self.source.skipped)

    @property
    def duration_s(self) -> float:
        """Span of the used messages (s)."""
        return max(0, self.end_ns - self.start_ns) / 1e9


def _select_topics(source: BagSource, store: Typestore, warnings: list[str]) -> dict[str, BagTopic]:
    chosen: dict[str, BagTopic] = {}
    foreign: list[str] = []
    for name, msgtype in sorted(source.topics.items()):
        topic = classify_topic(name)
        if topic is None:
            foreign.append(f"{name} ({msgtype})")
            continue
        if msgtype != topic.msgtype:
            warnings.append(f"{name}: type {msgtype!r}, expected {topic.msgtype!r}; ignored")
            continue
        digest = source.digests.get(name, "")
        if name not in source.definitions and digest and digest != store.hash_rihs01(msgtype):
            # Without the bag's definition nothing can be mapped.
            # An older or newer definition: decoding may still work; failures count.
            warnings.append(f"{name}: the bag's definition of {msgtype} differs from this "
                            "build's (type hash); decoding with this build's")
        chosen[name] = topic
    if foreign:
        warnings.append(f"ignoring {len(foreign)} topic(s) that are not fleet topics: "
                        + ", ".join(foreign[:8]) + (" ..." if len(foreign) > 8 else ""))
    return chosen


def _add(track: RobotTrack, topic: BagTopic, msg: Any, log_ns: int, data: bytes) -> None:
    track.counts[topic.kind.value] += 1
    if topic.kind in (TopicKind.IMAGE, TopicKind.STATE) and \
            len(track.stamp_offsets) < _OFFSET_SAMPLES:
        track.stamp_offsets.append(stamp_ns(msg.header.stamp) - log_ns)
    if topic.kind in (TopicKind.IMAGE, TopicKind.STATE) and \
            topic.name not in track.first_input_ns:
        track.first_input_ns[topic.name] = log_ns
        track.first_inputs[topic.name] = (stamp_ns(msg.header.stamp), data)
    if topic.kind == TopicKind.IMAGE:
        track.cameras.add(topic.camera)
    elif topic.kind == TopicKind.STATE:
        track.has_state = True
    elif topic.kind == TopicKind.BUDGET:
        # xinfer_ros/ResponseBudget, or a plain std_msgs number in ms.
        track.budgets.append((log_ns, float(msg.budget_ms if hasattr(msg, "budget_ms")
                                            else msg.data)))
    elif topic.kind == TopicKind.REQUEST:
        track.requests.append(RecordedRequest(int(msg.seq), stamp_ns(msg.header.stamp), log_ns,
                                              float(msg.budget_ms), data))
    elif topic.kind == TopicKind.CHUNK:
        track.chunks.setdefault(int(msg.seq), chunk_from_msg(msg, log_ns))


def _check_robots(tracks: dict[str, RobotTrack], warnings: list[str],
                  topics: dict[str, BagTopic]) -> dict[str, RobotTrack]:
    robots: dict[str, RobotTrack] = {}
    for name, track in sorted(tracks.items()):
        if track.synthetic:
            mapped = {t.camera for t in topics.values()
                      if t.robot == name and t.kind == TopicKind.IMAGE}
            if track.context_ns is None or track.cameras != mapped:
                silent = sorted(mapped - track.cameras)
                warnings.append(f"{name}: " + (f"mapped camera(s) {silent}" if silent else
                                               "its joint state")
                                + " have no readable message; nothing to replay for it")
            else:
                robots[name] = track
            continue
        if not track.requests:
            warnings.append(f"{name}: no policy_request messages; nothing to replay for it")
            continue
        if not track.replayable:
            warnings.append(f"{name}: every request precedes the first frame of some camera "
                            "or joint state; nothing to replay for it")
            continue
        if not track.cameras:
            warnings.append(f"{name}: no camera topics; the server will reject its requests")
        if not track.has_state:
            warnings.append(f"{name}: no joint_states; the server will reject its requests")
        seqs = [r.seq for r in track.requests]
        if len(set(seqs)) != len(seqs):
            warnings.append(f"{name}: request seq numbers repeat (executor restarted?); "
                            "answers are matched to the first request of each seq")
        robots[name] = track
    return robots


def scan_bag(path: Path | str, store: Typestore | None = None,
             mapping: TopicMapping | None = None) -> RecordedRun:
    """Read a fleet bag, or a plain robot bag through a mapping, once.

    Args:
        path: Bag directory or MCAP file.
        store: Typestore for decoding (default :func:`make_typestore`).
        mapping: The robots' topics in a plain sensor bag; without one the bag must
            use the fleet's topic names.

    Returns:
        The recorded run; damage is in its warnings, ``bad`` and source.

    Raises:
        BagError: When the bag is unreadable or holds nothing replayable.
        MappingError: When a mapped topic is missing or of another type.
    """
    source = open_bag(path)
    store = store or make_typestore()
    warnings = list(source.warnings)
    topics = (mapping.bag_topics(source.topics) if mapping is not None
              else _select_topics(source, store, warnings))
    if not topics:
        raise BagError(f"{path}: no fleet topics (policy_request, camera, joint_states ...) "
                       f"among {sorted(source.topics)}")
    changes = _map_schemas(source, store, topics, warnings)
    synthetic = mapping is not None
    scanned = _scan(source, store, topics, synthetic)
    if source.read_error and (salvage := source.salvage()) is not None:
        retry = _scan(salvage, store, topics, synthetic)
        warnings.append(f"{source.read_error}; retried with a linear scan of the MCAP file")
        if retry.messages > scanned.messages:
            source, scanned = salvage, retry
    if source.read_error:
        warnings.append(source.read_error)
    warnings += source.damage
    if source.skipped:
        warnings.append(f"skipped {sum(source.skipped.values())} undecodable message(s): "
                        f"{dict(source.skipped)}")
    robots = _check_robots(scanned.tracks, warnings, topics)
    if not robots or scanned.start is None or scanned.end is None:
        what = ("no mapped robot has all its streams" if synthetic
                else "no readable policy_request messages")
        raise BagError(f"{path}: nothing to replay: {what}"
                       + "".join(f"; {w}" for w in warnings))
    return RecordedRun(source, robots, topics, scanned.start, scanned.end, scanned.bad,
                       warnings, changes)


def _map_schemas(source: BagSource, store: Typestore, topics: dict[str, BagTopic],
                 warnings: list[str]) -> list[TypeChange]:
    """Translate the topics recorded with other definitions (raises SchemaError)."""
    translators, changes = plan_translations(
        {name: source.topics[name] for name in topics if name in source.topics},
        {name: Definition(*source.definitions[name]) for name in topics
         if name in source.definitions}, store, warnings)
    source.translators = translators
    warnings += [change.describe() for change in changes]
    return changes


@dataclass
class _Scan:
    tracks: dict[str, RobotTrack] = field(default_factory=dict)
    bad: set[tuple[str, int]] = field(default_factory=set)
    start: int | None = None
    end: int | None = None
    messages: int = 0


def _scan(source: BagSource, store: Typestore, topics: dict[str, BagTopic],
          synthetic: bool = False) -> _Scan:
    """One pass over ``source``: decode, validate, collect."""
    out = _Scan()
    ordinals: Counter[str] = Counter()
    for item in source.messages(set(topics)):
        topic = topics[item.topic]
        ordinal = ordinals[item.topic]
        ordinals[item.topic] += 1
        try:
            msg = store.deserialize_cdr(item.data, item.msgtype)
        except Exception:
            out.bad.add((item.topic, ordinal))
            source.skipped[item.topic] += 1
            continue
        out.messages += 1
        out.start = item.timestamp if out.start is None else min(out.start, item.timestamp)
        out.end = item.timestamp if out.end is None else max(out.end, item.timestamp)
        if topic.robot:
            track = out.tracks.setdefault(topic.robot,
                                          RobotTrack(topic.robot, synthetic=synthetic))
            _add(track, topic, msg, item.timestamp, item.data)
    return out
