"""Per-robot observation buffers and request assembly for the inference server.

The server keeps the last few frames of each camera and the last joint states of each
robot. A request uses, per camera, the newest frame stamped at or before the request's
send stamp and no older than ``max_age_s`` (ROS-free: the buffers hold any object with
a ``header.stamp``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from xinfer_ros.errors import ObservationError

__all__ = ["ObservationError", "RobotObservations", "joint_positions", "stamp_seconds"]


def stamp_seconds(stamp: Any) -> float:
    """A builtin_interfaces/Time as float seconds."""
    return stamp.sec + stamp.nanosec * 1e-9


def joint_positions(names: Sequence[str], positions: Sequence[float],
                    order: Sequence[str]) -> list[float]:
    """Positions in the model's joint ``order``, looked up by name.

    An empty ``order`` takes the message's positions as they are.

    Raises:
        ObservationError: When a joint of ``order`` is missing from ``names``, or the
            message has fewer names than positions' worth of joints.
    """
    if not order:
        return list(positions)
    if len(names) != len(positions):
        raise ObservationError(f"joint_states has {len(names)} names for {len(positions)} "
                               "positions; joints are read by name")
    index = {name: i for i, name in enumerate(names)}
    missing = [name for name in order if name not in index]
    if missing:
        raise ObservationError(f"joint_states lacks joint(s) {missing}; it has {list(names)}")
    return [positions[index[name]] for name in order]


@dataclass
class RobotObservations:
    """Recent camera frames and joint states of one robot.

    Attributes:
        cameras: Number of cameras.
        depth: Messages kept per stream.
        last_seen: Monotonic time of the latest message from this robot.
    """

    cameras: int
    depth: int = 8
    last_seen: float = 0.0
    _images: list[deque[tuple[float, Any]]] = field(default_factory=list)
    _states: deque[tuple[float, Any]] = field(default_factory=deque)

    def __post_init__(self) -> None:
        self._images = [deque(maxlen=self.depth) for _ in range(self.cameras)]
        self._states = deque(maxlen=self.depth)

    def add_image(self, camera: int, msg: Any, now: float, stamp_s: float | None = None) -> None:
        """Keep a camera frame.

        Args:
            camera: Camera index.
            msg: The frame: a message with ``header.stamp``, or any object when
                ``stamp_s`` is given (the server keeps serialized frames).
            now: Monotonic arrival time.
            stamp_s: The frame's stamp in seconds (default: read from ``msg``).
        """
        stamp = stamp_seconds(msg.header.stamp) if stamp_s is None else stamp_s
        self._images[camera].append((stamp, msg))
        self.last_seen = now

    def add_state(self, msg: Any, now: float) -> None:
        """Keep a joint-state message."""
        self._states.append((stamp_seconds(msg.header.stamp), msg))
        self.last_seen = now

    def clear(self) -> None:
        """Forget every buffered message."""
        for buf in self._images:
            buf.clear()
        self._states.clear()

    @staticmethod
    def _pick(buf: deque[tuple[float, Any]], at: float, max_age: float, what: str) -> Any:
        after = None
        for t, msg in reversed(buf):
            if t <= at + 1e-6:
                if at - t > max_age:
                    raise ObservationError(
                        f"newest {what} at or before the request is {at - t:.3f} s old "
                        f"(max_observation_age_s={max_age})")
                return msg
            after = (msg, t)
        if after is None:
            raise ObservationError(f"no {what} received yet")
        # Nothing at or before the stamp (a server that just started): the frame
        # closest after it stands in, if it is close enough.
        msg, t = after
        if t - at > max_age:
            raise ObservationError(
                f"every buffered {what} is newer than the request stamp by more than "
                f"{max_age} s")
        return msg

    def assemble(self, at: float, max_age: float) -> tuple[list[Any], Any]:
        """The frames (one per camera) and the joint state to use for a request at ``at``.

        Per stream: the newest message stamped at or before ``at`` and at most
        ``max_age`` older; failing that, the oldest buffered one at most ``max_age``
        newer.

        Raises:
            ObservationError: Naming the stream that has no usable message.
        """
        images = [self._pick(buf, at, max_age, f"camera_{i}/image_raw")
                  for i, buf in enumerate(self._images)]
        state = self._pick(self._states, at, max_age, "joint_states")
        return images, state
