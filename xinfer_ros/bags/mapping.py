"""Which topics of a plain robot bag are which robot's cameras, joint state and budget.

A bag from ``ros2 bag record`` on a robot has its own topic names, often several
robots' worth, and no ``policy_request`` or ``action_chunk``. A :class:`TopicMapping`
says, per robot, which topics are its cameras (in the model's camera order), its
``sensor_msgs/JointState`` and, optionally, a budget topic. It is written as flags
(``--robot arm_7 --camera /arm_7/cam_front/image_raw --state /arm_7/joint_states``,
repeated per robot) or as a YAML file::

    robots:
      arm_7:
        cameras: [/arm_7/cam_front/image_raw, /arm_7/cam_wrist/compressed]
        state: /arm_7/joint_states
        budget: /arm_7/budget_ms      # optional

Cameras may be ``sensor_msgs/Image`` or ``sensor_msgs/CompressedImage`` (JPEG/PNG);
the replay publishes each on the fleet's name for that camera. A budget topic may be
``xinfer_ros/ResponseBudget`` or a ``std_msgs/Float32``/``Float64`` in milliseconds.
ROS-free.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from xinfer_ros.bags.reader import BagError
from xinfer_ros.bags.types import (
    COMPRESSED_TYPE,
    IMAGE_TYPE,
    STATE_TYPE,
    BagTopic,
    TopicKind,
    package_type,
)

__all__ = ["BUDGET_TYPES", "MappingError", "RobotMapping", "TopicMapping"]

#: Budget topic types a mapping accepts.
BUDGET_TYPES = (package_type("ResponseBudget"), "std_msgs/msg/Float64", "std_msgs/msg/Float32")
_ROBOT_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")


class MappingError(BagError):
    """A topic mapping that is malformed or does not fit the bag."""


@dataclass(frozen=True)
class RobotMapping:
    """One robot's topics in a plain bag.

    Attributes:
        name: The robot's name (its namespace in the fleet).
        cameras: Camera topics in the model's camera order.
        state: Its ``sensor_msgs/JointState`` topic.
        budget: A budget topic, if the bag recorded one.
    """

    name: str
    cameras: tuple[str, ...]
    state: str
    budget: str | None = None

    def __post_init__(self) -> None:
        """Check the name and that every stream is named.

        Raises:
            MappingError: A name that is no ROS namespace, no camera, no state, or a
                topic used twice.
        """
        if not _ROBOT_NAME.match(self.name):
            raise MappingError(f"robot name {self.name!r} is not a valid namespace "
                               "(a letter, then letters, digits and underscores)")
        if not self.cameras:
            raise MappingError(f"robot {self.name}: no camera topic")
        if not self.state:
            raise MappingError(f"robot {self.name}: no joint state topic")
        topics = [*self.cameras, self.state, *([self.budget] if self.budget else [])]
        if len(set(topics)) != len(topics):
            raise MappingError(f"robot {self.name}: a topic is mapped twice: {topics}")


@dataclass(frozen=True)
class TopicMapping:
    """Every mapped robot of a plain bag."""

    robots: tuple[RobotMapping, ...]

    def __post_init__(self) -> None:
        """Check that robots and topics are unique.

        Raises:
            MappingError: No robot, a robot twice, or one topic for two robots.
        """
        if not self.robots:
            raise MappingError("the mapping names no robot")
        names = [r.name for r in self.robots]
        if len(set(names)) != len(names):
            raise MappingError(f"a robot is mapped twice: {names}")
        seen: dict[str, str] = {}
        for robot in self.robots:
            for topic in (*robot.cameras, robot.state, robot.budget):
                if topic is None:
                    continue
                if topic in seen:
                    raise MappingError(f"topic {topic} is mapped to both {seen[topic]} "
                                       f"and {robot.name}")
                seen[topic] = robot.name

    @classmethod
    def from_flags(cls, items: Iterable[tuple[str, str]]) -> TopicMapping:
        """A mapping from ``(flag, value)`` pairs in command-line order.

        ``robot`` starts a robot; ``camera``, ``state`` and ``budget`` belong to the
        robot named last.

        Raises:
            MappingError: A stream flag before any ``robot``, or a robot without
                camera or state.
        """
        robots: list[dict[str, Any]] = []
        for flag, value in items:
            if flag == "robot":
                robots.append({"name": value, "cameras": [], "state": "", "budget": None})
            elif not robots:
                raise MappingError(f"--{flag} {value} comes before any --robot")
            elif flag == "camera":
                robots[-1]["cameras"].append(value)
            elif flag in ("state", "budget"):
                if robots[-1][flag]:
                    raise MappingError(f"robot {robots[-1]['name']}: --{flag} given twice")
                robots[-1][flag] = value
            else:
                raise MappingError(f"unknown mapping flag --{flag}")
        return cls(tuple(RobotMapping(r["name"], tuple(r["cameras"]), r["state"], r["budget"])
                         for r in robots))

    @classmethod
    def from_yaml(cls, path: Path | str) -> TopicMapping:
        """A mapping from a YAML file (see the module docstring).

        Raises:
            MappingError: An unreadable file or one of another shape.
        """
        try:
            data = yaml.safe_load(Path(path).read_text())
        except (OSError, yaml.YAMLError) as exc:
            raise MappingError(f"{path}: {exc}") from exc
        robots = data.get("robots") if isinstance(data, Mapping) else None
        if not isinstance(robots, Mapping):
            raise MappingError(f"{path}: expected a 'robots:' mapping of robot name to "
                               "cameras/state/budget")
        out = []
        for name, spec in robots.items():
            if not isinstance(spec, Mapping) or not isinstance(spec.get("cameras"), list):
                raise MappingError(f"{path}: robot {name}: expected 'cameras: [topics]' "
                                   "and 'state: topic'")
            out.append(RobotMapping(str(name), tuple(str(c) for c in spec["cameras"]),
                                    str(spec.get("state") or ""),
                                    str(spec["budget"]) if spec.get("budget") else None))
        return cls(tuple(out))

    def bag_topics(self, available: Mapping[str, str]) -> dict[str, BagTopic]:
        """The mapped topics as the bag holds them.

        Args:
            available: The bag's topics and their types.

        Raises:
            MappingError: A mapped topic the bag lacks, or one of a type it cannot be.
        """
        topics: dict[str, BagTopic] = {}
        for robot in self.robots:
            for cam, name in enumerate(robot.cameras):
                kind = _type_of(name, available, (IMAGE_TYPE, COMPRESSED_TYPE))
                suffix = "image_raw/compressed" if kind == COMPRESSED_TYPE else "image_raw"
                topics[name] = BagTopic(name, TopicKind.IMAGE, robot.name, cam, type_name=kind,
                                        publish_as=f"/{robot.name}/camera_{cam}/{suffix}")
            _type_of(robot.state, available, (STATE_TYPE,))
            topics[robot.state] = BagTopic(robot.state, TopicKind.STATE, robot.name,
                                           publish_as=f"/{robot.name}/joint_states")
            if robot.budget:
                kind = _type_of(robot.budget, available, BUDGET_TYPES)
                topics[robot.budget] = BagTopic(robot.budget, TopicKind.BUDGET, robot.name,
                                                type_name=kind, replayed=False)
        return topics

    @property
    def cameras(self) -> int:
        """The most cameras any robot has."""
        return max(len(r.cameras) for r in self.robots)


def _type_of(topic: str, available: Mapping[str, str], accepted: tuple[str, ...]) -> str:
    if topic not in available:
        near = sorted(available)
        raise MappingError(f"topic {topic} is not in the bag; it has {near[:12]}"
                           + (" ..." if len(near) > 12 else ""))
    kind = available[topic]
    if kind not in accepted:
        raise MappingError(f"topic {topic} carries {kind}; expected "
                           + " or ".join(accepted))
    return kind
