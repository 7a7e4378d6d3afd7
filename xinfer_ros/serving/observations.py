"""Per-robot observation buffers and request assembly for the inference server.

The server keeps the last few frames of each camera and the last joint states of each
robot. A request uses, per camera, the newest frame stamped at or before the request's
send stamp and no older than ``max_age_s`` (ROS-free: the buffers hold any object with
a ``header.stamp``).

Stored frames have a byte budget per robot (``max_frame_bytes``). A frame that does
not fit evicts the robot's oldest frames first, from the camera holding the most bytes,
so each camera keeps at least its newest frame and a large camera gives up depth before
a small one. A frame that cannot fit even then (beside the newest frame of every other
camera) is refused with a :class:`FrameBudgetError`, counted, and named in the reason
of a request that then has no usable frame of that camera. Refusing, rather than
downscaling on arrival, keeps arrival cheap: the server stores frames serialized and
never decodes one that no request picks.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Reversible, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Generic, Protocol, TypeVar, cast

from xinfer_ros.errors import ObservationError

if TYPE_CHECKING:  # typing.Unpack is 3.11+ (setup.py allows 3.10): annotations only
    from typing import Unpack

__all__ = ["FrameBudgetError", "NotObservedYetError", "ObservationError", "RobotObservations",
           "Stamp", "Stamped", "joint_positions", "stamp_seconds"]


class Stamp(Protocol):
    """A builtin_interfaces/Time."""

    @property
    def sec(self) -> int:
        """Whole seconds."""

    @property
    def nanosec(self) -> int:
        """Nanoseconds within the second."""


class _Header(Protocol):
    @property
    def stamp(self) -> Stamp:
        """The message's time."""


class Stamped(Protocol):
    """A message with a std_msgs/Header (sensor_msgs/Image, sensor_msgs/JointState)."""

    @property
    def header(self) -> _Header:
        """The message's header."""


#: What a camera stream keeps: a message, or the server's serialized frame.
FrameT = TypeVar("FrameT")
#: A joint-state message.
StateT = TypeVar("StateT", bound=Stamped)
_MsgT = TypeVar("_MsgT")

_MIB = 2**20


class NotObservedYetError(ObservationError):
    """No message of a stream close enough to the request's stamp has arrived (yet).

    Unlike a malformed message or a refused frame, this may change with the next
    message of the stream, so a server may wait for it.
    """


class FrameBudgetError(ObservationError):
    """A camera frame refused, or a request without a frame, for the robot's byte budget."""


def stamp_seconds(stamp: Stamp) -> float:
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
class RobotObservations(Generic[FrameT, StateT]):
    """Recent camera frames and joint states of one robot.

    Attributes:
        cameras: Number of cameras.
        depth: Messages kept per stream.
        max_frame_bytes: Byte budget of this robot's stored frames (0: none).
        last_seen: Monotonic time of the latest message from this robot.
        frames_refused: Frames refused for the budget so far.
    """

    cameras: int
    depth: int = 8
    max_frame_bytes: int = 0
    last_seen: float = 0.0
    frames_refused: int = 0
    _images: list[deque[tuple[float, FrameT, int]]] = field(default_factory=list)
    _camera_bytes: list[int] = field(default_factory=list)
    _refused: list[str] = field(default_factory=list)
    _states: deque[tuple[float, StateT]] = field(default_factory=deque)

    def __post_init__(self) -> None:
        # Unbounded deques: depth is enforced in add_image, which also keeps the byte
        # count (a deque's maxlen would drop frames behind the count's back).
        self._images = [deque() for _ in range(self.cameras)]
        self._camera_bytes = [0] * self.cameras
        self._refused = [""] * self.cameras
        self._states = deque(maxlen=self.depth)

    @property
    def frame_bytes(self) -> int:
        """Bytes of the frames stored now, as given to :meth:`add_image`."""
        return sum(self._camera_bytes)

    def add_image(self, camera: int, msg: FrameT, now: float, stamp_s: float | None = None,
                  nbytes: int = 0) -> None:
        """Keep a camera frame, within the byte budget.

        Args:
            camera: Camera index.
            msg: The frame: a message with ``header.stamp``, or any object when
                ``stamp_s`` is given (the server keeps serialized frames).
            now: Monotonic arrival time.
            stamp_s: The frame's stamp in seconds (default: read from ``msg``).
            nbytes: The frame's size in memory, counted against ``max_frame_bytes``.

        Raises:
            FrameBudgetError: When the frame cannot fit the budget beside the newest
                frame of every other camera; it is counted and not kept.
        """
        # Without stamp_s the frame is a message (see msg).
        stamp = stamp_seconds(cast(Stamped, msg).header.stamp) if stamp_s is None else stamp_s
        self.last_seen = now
        self._check_fits(camera, nbytes)
        buf = self._images[camera]
        if len(buf) >= self.depth:
            self._camera_bytes[camera] -= buf.popleft()[2]
        self._make_room(camera, nbytes)
        buf.append((stamp, msg, nbytes))
        self._camera_bytes[camera] += nbytes
        self._refused[camera] = ""

    def _check_fits(self, camera: int, nbytes: int) -> None:
        """Refuse a frame that cannot fit beside the newest frame of every other camera."""
        budget = self.max_frame_bytes
        if not budget:
            return
        others = sum(buf[-1][2] for i, buf in enumerate(self._images) if i != camera and buf)
        if nbytes + others > budget:
            self.frames_refused += 1
            reason = (f"camera_{camera} frame of {nbytes / _MIB:.2f} MiB refused: with the "
                      f"newest frame of each other camera ({others / _MIB:.2f} MiB) it "
                      f"exceeds max_frame_bytes_per_robot={budget} ({budget / _MIB:.2f} MiB)")
            self._refused[camera] = reason
            raise FrameBudgetError(reason)

    def _make_room(self, camera: int, nbytes: int) -> None:
        """Evict the oldest frames of the fullest cameras until ``nbytes`` more fit."""
        while self.max_frame_bytes and self.frame_bytes + nbytes > self.max_frame_bytes:
            # The new frame replaces its own camera's frames, so all of them may go;
            # another camera keeps its newest.
            victim = max((i for i, buf in enumerate(self._images)
                          if len(buf) > (0 if i == camera else 1)),
                         key=self._camera_bytes.__getitem__)
            self._camera_bytes[victim] -= self._images[victim].popleft()[2]

    def add_state(self, msg: StateT, now: float) -> None:
        """Keep a joint-state message."""
        self._states.append((stamp_seconds(msg.header.stamp), msg))
        self.last_seen = now

    def clear(self) -> None:
        """Forget every buffered message."""
        for buf in self._images:
            buf.clear()
        self._camera_bytes = [0] * self.cameras
        self._refused = [""] * self.cameras
        self._states.clear()

    @staticmethod
    def _pick(buf: Reversible[tuple[float, _MsgT, Unpack[tuple[int, ...]]]], at: float,
              max_age: float, what: str) -> _MsgT:
        after: tuple[_MsgT, float] | None = None
        stale_s: float | None = None  # age of the newest one at or before, too old
        for t, msg, *_ in reversed(buf):
            if t <= at + 1e-6:
                if at - t <= max_age:
                    return msg
                stale_s = at - t
                break
            after = (msg, t)
        # None young enough at or before the stamp (a server that just started, or
        # frames delivered late after a stall): the one closest after it stands in, if
        # it is close enough.
        if after is not None and after[1] - at <= max_age:
            return after[0]
        if stale_s is not None:
            raise NotObservedYetError(
                f"newest {what} at or before the request is {stale_s:.3f} s old "
                f"(max_observation_age_s={max_age})")
        if after is None:
            raise NotObservedYetError(f"no {what} received yet")
        raise NotObservedYetError(
            f"every buffered {what} is newer than the request stamp by more than "
            f"{max_age} s")

    def assemble(self, at: float, max_age: float) -> tuple[list[FrameT], StateT]:
        """The frames (one per camera) and the joint state to use for a request at ``at``.

        Per stream: the newest message stamped at or before ``at`` and at most
        ``max_age`` older; failing that, the oldest buffered one at most ``max_age``
        newer.

        Raises:
            ObservationError: Naming the stream that has no usable message;
                :class:`FrameBudgetError` when a camera has none because its latest
                frame was refused for the byte budget.
        """
        images: list[FrameT] = []
        for i, buf in enumerate(self._images):
            try:
                images.append(self._pick(buf, at, max_age, f"camera_{i}/image_raw"))
            except ObservationError as exc:
                if self._refused[i]:
                    raise FrameBudgetError(f"{exc}; its latest frame was refused: "
                                           f"{self._refused[i]}") from None
                raise
        state = self._pick(self._states, at, max_age, "joint_states")
        return images, state
