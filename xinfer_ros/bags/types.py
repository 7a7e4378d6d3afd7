"""What a fleet bag holds: topics, message types, QoS and the rosbags typestore.

Shared by the recorder, the replayer and the sample-bag script. ROS-free: it only
needs ``rosbags``, so a bag can be inspected or written without rclpy.

The typestore holds the standard ROS 2 types of one distribution (Humble, Jazzy or
Kilted, as shipped by rosbags) plus this package's ``msg/*.msg`` definitions, so the
writer stores full message definitions and type hashes in the bag: ``ros2 bag info``,
``ros2 bag play`` and Foxglove need nothing else to decode it.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from rosbags.interfaces import (
    Qos,
    QosDurability,
    QosHistory,
    QosLiveliness,
    QosReliability,
    QosTime,
)
from rosbags.typesys import Stores, get_types_from_msg, get_typestore
from rosbags.typesys.store import Typestore

from xinfer_ros.config_paths import msg_dir

__all__ = [
    "COMPRESSED_TYPE",
    "DISTROS",
    "IMAGE_TYPE",
    "MSG_DIR",
    "STATE_TYPE",
    "BagTopic",
    "Role",
    "TopicKind",
    "classify_topic",
    "fleet_topics",
    "make_typestore",
    "msg_dir",
    "package_type",
]

PACKAGE = "xinfer_ros"
#: The package's message definitions in a source checkout.
MSG_DIR = msg_dir()
#: rosbags typestores by ROS 2 distribution name.
DISTROS: dict[str, Stores] = {
    "humble": Stores.ROS2_HUMBLE,
    "jazzy": Stores.ROS2_JAZZY,
    "kilted": Stores.ROS2_KILTED,
}
IMAGE_TYPE = "sensor_msgs/msg/Image"
COMPRESSED_TYPE = "sensor_msgs/msg/CompressedImage"
STATE_TYPE = "sensor_msgs/msg/JointState"
FLEET_STATS_TOPIC = "/xinfer/fleet_stats"


def package_type(name: str) -> str:
    """The full type name of a message of this package: ``xinfer_ros/msg/<name>``."""
    return f"{PACKAGE}/msg/{name}"


class TopicKind(str, Enum):
    """What a topic of a fleet bag carries."""

    IMAGE = "image"
    STATE = "joint_states"
    BUDGET = "budget"
    REQUEST = "policy_request"
    CHUNK = "action_chunk"
    FLEET_STATS = "fleet_stats"


class Role(str, Enum):
    """Which side of the server a topic is on."""

    INPUT = "input"    # robot -> server; the replayer publishes these
    OUTPUT = "output"  # server -> robot; the replayer compares against these


TOPIC_TYPES: dict[TopicKind, str] = {
    TopicKind.IMAGE: IMAGE_TYPE,
    TopicKind.STATE: STATE_TYPE,
    TopicKind.BUDGET: package_type("ResponseBudget"),
    TopicKind.REQUEST: package_type("PolicyRequest"),
    TopicKind.CHUNK: package_type("ActionChunk"),
    TopicKind.FLEET_STATS: package_type("FleetStats"),
}

_TOPIC_RE = re.compile(
    r"^/(?P<robot>[A-Za-z][A-Za-z0-9_]*)/"
    r"(?:camera_(?P<cam>\d+)/image_raw(?P<compressed>/compressed)?"
    r"|(?P<leaf>joint_states|budget|policy_request|action_chunk))$")


def _time(sec: int = 0, nsec: int = 0) -> QosTime:
    return QosTime(sec=sec, nsec=nsec)


def _qos(reliable: bool, transient_local: bool, depth: int) -> Qos:
    # Zero durations mean "unspecified" to rmw; ros2 bag play then uses its defaults.
    return Qos(
        history=QosHistory.KEEP_LAST, depth=depth,
        reliability=QosReliability.RELIABLE if reliable else QosReliability.BEST_EFFORT,
        durability=QosDurability.TRANSIENT_LOCAL if transient_local else QosDurability.VOLATILE,
        deadline=_time(), lifespan=_time(), liveliness=QosLiveliness.AUTOMATIC,
        liveliness_lease_duration=_time(), avoid_ros_namespace_conventions=False)


#: The QoS the fleet's publishers offer (DESIGN §4), stored with each connection so a
#: player republishes with compatible settings.
SENSOR_QOS = _qos(reliable=False, transient_local=False, depth=5)
BUDGET_QOS = _qos(reliable=True, transient_local=True, depth=1)
RELIABLE_QOS = _qos(reliable=True, transient_local=False, depth=50)

_QOS: dict[TopicKind, Qos] = {
    TopicKind.IMAGE: SENSOR_QOS, TopicKind.STATE: SENSOR_QOS, TopicKind.BUDGET: BUDGET_QOS,
    TopicKind.REQUEST: RELIABLE_QOS, TopicKind.CHUNK: RELIABLE_QOS,
    TopicKind.FLEET_STATS: _qos(reliable=True, transient_local=False, depth=10),
}


@dataclass(frozen=True)
class BagTopic:
    """One topic of a fleet bag.

    Attributes:
        name: Absolute topic name in the bag.
        kind: What it carries.
        robot: Robot namespace without slashes ("" for server-wide topics).
        camera: Camera index for image topics, else -1.
        type_name: The ROS 2 type when it is not the kind's usual one (a compressed
            camera, a budget recorded as ``std_msgs/Float64``).
        publish_as: Where a replay publishes it when that is not ``name`` (a robot's
            own camera topic played on the fleet's name for that camera).
        replayed: Whether a replay publishes it at all (a budget a plain robot bag
            recorded in its own type only sets the requests' budgets).
    """

    name: str
    kind: TopicKind
    robot: str = ""
    camera: int = -1
    type_name: str = ""
    publish_as: str = ""
    replayed: bool = True

    @property
    def msgtype(self) -> str:
        """The ROS 2 type name the topic must carry."""
        return self.type_name or TOPIC_TYPES[self.kind]

    @property
    def target(self) -> str:
        """The topic a replay publishes it on."""
        return self.publish_as or self.name

    @property
    def compressed(self) -> bool:
        """Whether it is a camera of ``sensor_msgs/CompressedImage``."""
        return self.msgtype == COMPRESSED_TYPE

    @property
    def qos(self) -> Qos:
        """The QoS its publisher offers in the fleet."""
        return _QOS[self.kind]

    @property
    def role(self) -> Role:
        """Input to the server or output of it."""
        return Role.OUTPUT if self.kind in (TopicKind.CHUNK, TopicKind.FLEET_STATS) \
            else Role.INPUT


def classify_topic(name: str) -> BagTopic | None:
    """The fleet topic ``name`` is, or ``None`` for a topic of another tool."""
    if name == FLEET_STATS_TOPIC:
        return BagTopic(name, TopicKind.FLEET_STATS)
    match = _TOPIC_RE.match(name)
    if match is None:
        return None
    robot = match["robot"]
    if match["cam"] is not None:
        return BagTopic(name, TopicKind.IMAGE, robot, int(match["cam"]),
                        type_name=COMPRESSED_TYPE if match["compressed"] else "")
    return BagTopic(name, TopicKind(match["leaf"]), robot)


def fleet_topics(robots: list[str], cameras: int, images: bool = True) -> list[BagTopic]:
    """Every topic the recorder writes for ``robots`` with ``cameras`` cameras each."""
    topics: list[BagTopic] = []
    for robot in robots:
        if images:
            topics += [BagTopic(f"/{robot}/camera_{i}/image_raw", TopicKind.IMAGE, robot, i)
                       for i in range(cameras)]
        topics += [BagTopic(f"/{robot}/{kind.value}", kind, robot)
                   for kind in (TopicKind.STATE, TopicKind.BUDGET, TopicKind.REQUEST,
                                TopicKind.CHUNK)]
    topics.append(BagTopic(FLEET_STATS_TOPIC, TopicKind.FLEET_STATS))
    return topics


def default_distro() -> str:
    """``$ROS_DISTRO`` when rosbags knows it, else ``kilted`` (the wheels' distribution)."""
    distro = os.environ.get("ROS_DISTRO", "").lower()
    return distro if distro in DISTROS else "kilted"


def make_typestore(distro: str | None = None, msgs: Path | None = None) -> Typestore:
    """A typestore of ``distro``'s standard types plus this package's messages.

    Args:
        distro: ``humble``, ``jazzy`` or ``kilted`` (default :func:`default_distro`).
        msgs: Directory of ``*.msg`` files (default :func:`msg_dir`).

    Raises:
        ValueError: On an unknown distribution or a missing message directory.
    """
    distro = (distro or default_distro()).lower()
    if distro not in DISTROS:
        raise ValueError(f"unknown ROS 2 distribution {distro!r}; choose one of {list(DISTROS)}")
    store = get_typestore(DISTROS[distro])
    folder = msgs or msg_dir()
    files = sorted(folder.glob("*.msg"))
    if not files:
        raise ValueError(f"no message definitions (*.msg) in {folder}")
    types: dict = {}
    for path in files:
        types.update(get_types_from_msg(path.read_text(), package_type(path.stem)))
    store.register(types)
    return store
