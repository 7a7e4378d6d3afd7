"""Fleet recorder: robot inputs and server outputs into a rosbag2 bag.

Per robot on its list it records ``camera_{i}/image_raw``, ``joint_states``, ``budget``
and ``policy_request`` (the server's inputs) and ``action_chunk`` (its output), plus the
server-wide ``/xinfer/fleet_stats``, into an MCAP (default) or sqlite3 rosbag2 bag
written with ``rosbags``. Every connection carries its message definition, RIHS01 type
hash and offered QoS, so ``ros2 bag info``/``play`` and Foxglove read the bag as is.

Subscriptions are raw: the callback gets the CDR bytes a publisher sent (exactly what
``rclpy.serialization.serialize_message`` produces), written without a decode/encode
round trip. Each message is stamped with its receive time.

SIGINT and SIGTERM end recording cleanly: the node stops spinning, takes whatever DDS
already delivered to its readers (bounded drain), and closes the bag, which writes the
MCAP summary and ``metadata.yaml``. A message received before the signal is in the bag.
"""

from __future__ import annotations

import importlib
import shutil
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import rclpy
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.qos import QoSProfile, ReliabilityPolicy, qos_profile_sensor_data
from rclpy.signals import SignalHandlerOptions
from rosbags.rosbag2 import StoragePlugin, Writer
from rosbags.rosbag2.writer import Connection

from xinfer_ros.bags.scan import cdr_header_stamp_ns
from xinfer_ros.bags.types import (
    FLEET_STATS_TOPIC,
    BagTopic,
    TopicKind,
    fleet_topics,
    make_typestore,
)
from xinfer_ros.nodes.lifetime import destroyed_on_failure
from xinfer_ros.nodes.params import ParamSpec, declare_params, robot_names
from xinfer_ros.nodes.qos import LATCHED_QOS
from xinfer_ros.nodes.runtime import StopFlag, keep_discovery_local

__all__ = [
    "PARAMS",
    "STORAGES",
    "Recorder",
    "StopFlag",
    "drain",
    "main",
    "message_class",
    "run_recorder",
]

STORAGES = {"mcap": StoragePlugin.MCAP, "sqlite3": StoragePlugin.SQLITE3}

PARAMS = [
    ParamSpec("robots", ["robot_1"], "robot namespaces to record",
              check=lambda v: None if v else "the robot list is empty"),
    ParamSpec("cameras", 3, "cameras per robot", 0, 16),
    ParamSpec("output", "", "bag directory to create (must not exist)",
              check=lambda v: None if v else "required: the bag directory to create"),
    ParamSpec("storage", "mcap", "bag storage", choices=tuple(STORAGES)),
    ParamSpec("bag_version", 8, "rosbag2 metadata version (8: Jazzy+, 9: Kilted)", 8, 9),
    ParamSpec("distro", "", "typestore distribution: humble, jazzy, kilted (default $ROS_DISTRO)"),
    ParamSpec("record_images", True, "record camera images"),
    ParamSpec("max_duration_s", 0.0, "stop after this long (s; 0: until a signal)",
              0.0, 1e7),
]

#: Settle time of the drain after a signal: stop once DDS delivered nothing this long.
DRAIN_QUIET_S = 0.2
#: Upper bound of the drain, whatever arrives.
DRAIN_MAX_S = 1.0


def _subscription_qos(topic: BagTopic) -> QoSProfile:
    # Match each publisher of the fleet: a reliable reader would never match the
    # cameras' best-effort writers; a transient-local one gets the budget in force.
    if topic.kind in (TopicKind.IMAGE, TopicKind.STATE):
        # Best effort like the publishers, but a deeper reader queue than the sensor
        # profile's 5, so a recorder busy writing a frame does not overwrite the next.
        return QoSProfile(depth=50, reliability=qos_profile_sensor_data.reliability,
                          durability=qos_profile_sensor_data.durability)
    if topic.kind == TopicKind.BUDGET:
        # Latched like the robots' writers (the budget in force on joining), with a
        # deeper reader queue: a depth-1 reader replaces a budget the recorder has not
        # taken yet while it is busy writing (one of three lost in a loaded CI run).
        return QoSProfile(depth=10, reliability=LATCHED_QOS.reliability,
                          durability=LATCHED_QOS.durability)
    return QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE)


def message_class(msgtype: str) -> type:
    """The rclpy message class of ``pkg/msg/Name`` (rosidl_runtime_py is not installed).

    Raises:
        ValueError: When the type is not importable here.
    """
    package, kind, name = [*msgtype.split("/"), "", ""][:3]
    try:
        return getattr(importlib.import_module(f"{package}.{kind}"), name)
    except (ImportError, AttributeError, ValueError) as exc:
        raise ValueError(f"message type {msgtype!r} is not available: {exc}") from exc


class Recorder(Node):
    """The recorder node; see the module docstring.

    Args:
        kwargs: Passed to :class:`rclpy.node.Node` (parameter overrides, ...).
    """

    @destroyed_on_failure
    def __init__(self, **kwargs: Any) -> None:
        super().__init__("recorder", **kwargs)
        p = declare_params(self, PARAMS)
        self.params = p
        robots = robot_names(p["robots"])
        self.topics = fleet_topics(robots, p["cameras"], images=p["record_images"])
        self.path = Path(p["output"]).expanduser()
        if self.path.exists():
            raise ValueError(f"output {self.path} exists already; not overwriting")
        store = make_typestore(p["distro"] or None)
        self.counts: Counter[str] = Counter()
        self.started = time.monotonic()
        #: While false, stream messages are dropped (counted in ``held_back``); the
        #: budget, which is state delivered once, is always kept. See :meth:`arm_when_matched`.
        self.armed = True
        self.held_back = 0
        self._chunk_path_live = False
        #: ROS time of arming after a hold-back (None: recording from the start).
        self._armed_ns: int | None = None
        writer = Writer(self.path, version=p["bag_version"],
                        storage_plugin=STORAGES[p["storage"]])
        writer.open()
        self._writer: Writer | None = writer
        self._connections: dict[str, Connection] = {}
        # Every connection is added up front, so the bag lists all fleet topics (with
        # zero counts for silent ones) and schemas sit at the start of the file.
        for topic in self.topics:
            self._connections[topic.name] = self._writer.add_connection(
                topic.name, topic.msgtype, typestore=store, offered_qos_profiles=[topic.qos])
            self.create_subscription(message_class(topic.msgtype), topic.name,
                                     self._callback(topic.name), _subscription_qos(topic),
                                     raw=True)
        self.get_logger().info(
            f"recording {len(self.topics)} topics of {len(robots)} robots {robots} "
            f"to {self.path} ({p['storage']})")

    def _callback(self, topic: str) -> Callable[[bytes], None]:
        def write(data: bytes) -> None:
            self._write(topic, data)

        return write

    def _write(self, topic: str, data: bytes) -> None:
        if self._writer is None:
            return  # closed: a late callback of a shutting-down executor
        if not self.armed and not topic.endswith("/budget"):
            self.held_back += 1
            # A chunk that reached us proves the server-to-recorder path is matched;
            # discovering the publisher alone does not (its first samples can miss us).
            self._chunk_path_live |= topic.endswith("/action_chunk")
            return
        if topic.endswith("/policy_request") and self._armed_ns is not None:
            # Requests and answers travel on separate topics: a request sent before
            # arming can reach us after its answer did, which was held back. Recorded, it
            # would be a request without its answer.
            sent = cdr_header_stamp_ns(data)
            if sent is not None and sent < self._armed_ns:
                self.held_back += 1
                return
        stamp = self.get_clock().now().nanoseconds
        self._writer.write(self._connections[topic], stamp, data)
        self.counts[topic] += 1

    def unmatched(self) -> list[str]:
        """Recorded topics that have no publisher yet."""
        return [t.name for t in self.topics if self.count_publishers(t.name) == 0]

    def arm_when_matched(self, deadline: float) -> bool:
        """Arm once every topic has a publisher and a chunk came through, or at ``deadline``.

        A recorder started next to a fleet discovers the busy server last; recording
        only from the moment everything is connected, and a chunk has actually reached
        the recorder, keeps the bag from opening with requests whose answers were never
        seen. ``deadline`` is monotonic. Returns whether it is armed.
        """
        if not self.armed and (time.monotonic() >= deadline or
                               (self._chunk_path_live and not self.unmatched())):
            self.armed = True
            self.started = time.monotonic()
            self._armed_ns = self.get_clock().now().nanoseconds
            if missing := self.unmatched():
                self.get_logger().warning(f"recording without publishers on {missing}")
        return self.armed

    @property
    def message_count(self) -> int:
        """Messages written so far."""
        return sum(self.counts.values())

    def expired(self) -> bool:
        """Whether ``max_duration_s`` has passed."""
        limit = self.params["max_duration_s"]
        return limit > 0 and time.monotonic() - self.started >= limit

    def abandon(self) -> None:
        """Remove the bag a constructor that raised had opened (see ``lifetime``).

        Nothing was recorded into it, and the path did not exist before: left there,
        it would only make the next start refuse the output as existing.
        """
        if getattr(self, "_writer", None) is not None:
            try:
                self.close()
            finally:
                shutil.rmtree(self.path, ignore_errors=True)

    def close(self) -> None:
        """Close the bag (MCAP summary, ``metadata.yaml``); idempotent."""
        writer, self._writer = self._writer, None
        if writer is None:
            return
        writer.close()
        self.get_logger().info(
            f"closed {self.path}: {self.message_count} messages "
            f"({', '.join(f'{t}={n}' for t, n in sorted(self.counts.items())) or 'none'})")


def drain(executor: SingleThreadedExecutor, recorder: Recorder,
          quiet_s: float = DRAIN_QUIET_S, max_s: float = DRAIN_MAX_S) -> None:
    """Take what DDS already delivered until ``quiet_s`` passes with nothing new.

    Bounded by ``max_s`` whatever arrives, so a busy fleet cannot hold the stop.
    """
    end = time.monotonic() + max_s
    last_count, last_change = recorder.message_count, time.monotonic()
    while (now := time.monotonic()) < end and now - last_change < quiet_s:
        executor.spin_once(timeout_sec=0.02)
        if recorder.message_count != last_count:
            last_count, last_change = recorder.message_count, time.monotonic()


def run_recorder(recorder: Recorder, stop: Callable[[], bool],
                 poll_s: float = 0.05) -> None:
    """Spin ``recorder`` until ``stop()`` or its duration is up, then drain and close.

    Args:
        recorder: The node (rclpy initialised).
        stop: Polled between spins; true ends recording.
        poll_s: Longest wait for one callback, which bounds the reaction to ``stop``.
    """
    executor = SingleThreadedExecutor()
    executor.add_node(recorder)
    try:
        while not stop() and not recorder.expired() and rclpy.ok():
            executor.spin_once(timeout_sec=poll_s)
        if rclpy.ok():
            drain(executor, recorder)
    finally:
        recorder.close()
        executor.shutdown()


def main(argv: Sequence[str] | None = None) -> int:
    """Record until SIGINT/SIGTERM (or ``max_duration_s``); return the exit status."""
    # rclpy's own handlers would shut the context down at once and lose what DDS
    # already delivered; ours only set a flag, and the loop drains before closing. The
    # flag is up before rclpy.init: a Ctrl-C there (default handling would raise
    # KeyboardInterrupt out of main) leaves an empty, complete bag instead.
    with StopFlag() as flag:
        keep_discovery_local()
        rclpy.init(args=list(sys.argv if argv is None else argv),
                   signal_handler_options=SignalHandlerOptions.NO)
        try:
            recorder = Recorder()
        except (ValueError, OSError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            rclpy.try_shutdown()
            return 2
        try:
            run_recorder(recorder, lambda: flag.signal is not None)
        finally:
            recorder.destroy_node()
            rclpy.try_shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())


def make_recorder(robots: list[str], output: Path, *, cameras: int, storage: str,
                  bag_version: int, distro: str, record_images: bool) -> Recorder:
    """A :class:`Recorder` with these parameters (rclpy initialised).

    Raises:
        ValueError: On an invalid parameter (one line naming it).
        OSError: When the bag cannot be created.
    """
    return Recorder(parameter_overrides=[
        Parameter("robots", value=robots), Parameter("cameras", value=cameras),
        Parameter("output", value=str(output)), Parameter("storage", value=storage),
        Parameter("bag_version", value=bag_version), Parameter("distro", value=distro),
        Parameter("record_images", value=record_images)])


def wait_for_server(timeout: float, alive: Callable[[], bool],
                    signalled: Callable[[], bool]) -> bool:
    """Wait until an inference server publishes fleet statistics (it finished starting).

    Args:
        timeout: Longest wait (s).
        alive: False once the processes that should bring the server up died.
        signalled: True once the user asked to stop.
    """
    probe = rclpy.create_node("xinfer_record_probe")
    try:
        end = time.monotonic() + timeout
        while time.monotonic() < end and not signalled():
            if probe.count_publishers(FLEET_STATS_TOPIC) > 0:
                return True
            if not alive():
                return False
            time.sleep(0.1)
        return False
    finally:
        probe.destroy_node()
