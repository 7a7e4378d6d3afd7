"""Per-joint command limits between the policy and the arm (no ROS, no torch).

The executor never sends a command outside the robot's joint limits: position bounds,
a velocity limit, an acceleration limit and optionally a jerk limit per joint, in the
terms of ros2_control's ``joint_limits`` (the YAML file format is read by
:func:`limits_from_yaml`). Velocities, accelerations and jerks are finite differences
of consecutive commands one control tick ``Δ`` apart.

:meth:`CommandLimits.clamp` brings a command within the limits, tightest first: the
jerk bound narrows the allowed acceleration, the acceleration bound the allowed
velocity, the velocity bound the allowed position, and the position bounds win over
all of them (a joint commanded past its bound stops there, even if that takes a larger
deceleration). From a command within the position bounds the result therefore always
lies within the position bounds and the velocity limit.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
import yaml

from xinfer_ros.errors import XInferRosError

__all__ = [
    "LIMIT_KINDS",
    "LIMIT_RTOL",
    "CommandLimits",
    "LimitsError",
    "limits_from_yaml",
]

FloatArray = npt.NDArray[np.float64]

#: The limits a command can break, in the order :meth:`CommandLimits.violations` names
#: them.
LIMIT_KINDS = ("position", "velocity", "acceleration", "jerk")
#: Slack of every limit check, relative and absolute (rounding of the finite
#: differences, not policy): a value passes up to ``limit * (1 + LIMIT_RTOL) + LIMIT_RTOL``.
LIMIT_RTOL = 1e-9


class LimitsError(XInferRosError, ValueError):
    """Joint limits that contradict each other or name joints the robot does not have."""


def _vector(value: float | Sequence[float], dim: int, name: str) -> FloatArray:
    """One value for every joint or one per joint, as a float vector of length ``dim``."""
    arr = np.atleast_1d(np.asarray(value, dtype=np.float64))
    if arr.ndim != 1 or len(arr) not in (1, dim):
        raise LimitsError(f"{name} needs 1 or {dim} values, got {arr.size}")
    return np.broadcast_to(arr, (dim,)).copy()


@dataclass(frozen=True)
class CommandLimits:
    """Limits of every joint, in the model's joint order (``inf``: no limit).

    Attributes:
        min_position: Lowest position per joint (robot units).
        max_position: Highest position per joint.
        max_velocity: Largest speed per joint (units/s).
        max_acceleration: Largest acceleration per joint (units/s²).
        max_jerk: Largest jerk per joint (units/s³).
    """

    min_position: FloatArray
    max_position: FloatArray
    max_velocity: FloatArray
    max_acceleration: FloatArray
    max_jerk: FloatArray

    @classmethod
    def build(cls, dim: int, *, min_position: float | Sequence[float] = -math.inf,
              max_position: float | Sequence[float] = math.inf,
              max_velocity: float | Sequence[float] = math.inf,
              max_acceleration: float | Sequence[float] = math.inf,
              max_jerk: float | Sequence[float] = math.inf,
              names: Sequence[str] | None = None) -> CommandLimits:
        """Checked limits of ``dim`` joints; each argument is one value or one per joint.

        Args:
            dim: Number of joints.
            min_position: Lower position bound(s).
            max_position: Upper position bound(s).
            max_velocity: Velocity limit(s), > 0.
            max_acceleration: Acceleration limit(s), > 0.
            max_jerk: Jerk limit(s), > 0.
            names: Joint names for error messages (default ``joint_<i>``).

        Raises:
            LimitsError: On a wrong count, a NaN, ``min > max`` or a rate limit ≤ 0.
        """
        limits = cls(_vector(min_position, dim, "min_position"),
                     _vector(max_position, dim, "max_position"),
                     _vector(max_velocity, dim, "max_velocity"),
                     _vector(max_acceleration, dim, "max_acceleration"),
                     _vector(max_jerk, dim, "max_jerk"))
        limits.check(names or [f"joint_{i}" for i in range(dim)])
        return limits

    @classmethod
    def none(cls, dim: int) -> CommandLimits:
        """No limit on any of ``dim`` joints."""
        return cls.build(dim)

    @property
    def dim(self) -> int:
        """Number of joints."""
        return len(self.min_position)

    @property
    def bounded(self) -> bool:
        """Whether any joint has any finite limit."""
        return any(bool(np.any(np.isfinite(v))) for v in (
            self.min_position, self.max_position, self.max_velocity,
            self.max_acceleration, self.max_jerk))

    def check(self, names: Sequence[str]) -> None:
        """Raise :class:`LimitsError` naming the first joint whose limits contradict."""
        for i, name in enumerate(names):
            low, high = self.min_position[i], self.max_position[i]
            if math.isnan(low) or math.isnan(high) or low > high:
                raise LimitsError(f"joint {name!r}: min_position {low:g} exceeds "
                                  f"max_position {high:g}")
            for field in ("max_velocity", "max_acceleration", "max_jerk"):
                value = float(getattr(self, field)[i])
                if not value > 0.0:
                    raise LimitsError(f"joint {name!r}: {field} must be > 0, got {value:g}")

    def within_positions(self, actions: FloatArray) -> bool:
        """Whether every row of ``actions`` (``(..., D)``) lies within the position bounds."""
        return bool(np.all((actions >= self.min_position) & (actions <= self.max_position)))

    def clamp(self, command: FloatArray, prev: FloatArray | None,
              prev_velocity: FloatArray | None, prev_acceleration: FloatArray | None,
              dt: float) -> FloatArray:
        """The command nearest ``command`` that keeps every limit from ``prev``.

        Args:
            command: Wanted command ``(D,)``.
            prev: Previous command (``None``: none; only position bounds apply).
            prev_velocity: Velocity of the previous step (``None``: rest is not assumed,
                the acceleration and jerk limits do not apply to this step).
            prev_acceleration: Acceleration of the previous step (``None``: the jerk
                limit does not apply).
            dt: Control tick (s).
        """
        if prev is None:
            return np.clip(command, self.min_position, self.max_position)
        velocity = (command - prev) / dt
        if prev_velocity is not None:
            acceleration = (velocity - prev_velocity) / dt
            if prev_acceleration is not None:
                acceleration = np.clip(acceleration, prev_acceleration - self.max_jerk * dt,
                                       prev_acceleration + self.max_jerk * dt)
            acceleration = np.clip(acceleration, -self.max_acceleration,
                                   self.max_acceleration)
            velocity = prev_velocity + acceleration * dt
        # Sequential clips: where the windows do not meet (the previous step was
        # faster than allowed), the tighter bound wins.
        velocity = np.clip(velocity, -self.max_velocity, self.max_velocity)
        return np.clip(prev + velocity * dt, self.min_position, self.max_position)

    def violations(self, command: FloatArray, prev: FloatArray | None,
                   prev_velocity: FloatArray | None, prev_acceleration: FloatArray | None,
                   dt: float) -> list[str]:
        """The limits ``command`` breaks from ``prev`` (names of :data:`LIMIT_KINDS`).

        Arguments as for :meth:`clamp`.
        """
        broken: list[str] = []
        if not self.within_positions(command):
            broken.append("position")
        if prev is None:
            return broken
        velocity = (command - prev) / dt
        if _exceeds(velocity, self.max_velocity):
            broken.append("velocity")
        if prev_velocity is None:
            return broken
        acceleration = (velocity - prev_velocity) / dt
        if _exceeds(acceleration, self.max_acceleration):
            broken.append("acceleration")
        if prev_acceleration is not None and _exceeds(
                (acceleration - prev_acceleration) / dt, self.max_jerk):
            broken.append("jerk")
        return broken


def _exceeds(value: FloatArray, limit: FloatArray) -> bool:
    return bool(np.any(np.abs(value) > limit * (1.0 + LIMIT_RTOL) + LIMIT_RTOL))


def _joint_entry(path: str, joint: str, entry: object) -> dict[str, float]:
    """One joint's enabled limits from a ``joint_limits`` entry."""
    if not isinstance(entry, Mapping):
        raise LimitsError(f"{path}: joint_limits.{joint} must be a mapping")
    out: dict[str, float] = {}
    pairs = (("has_position_limits", ("min_position", "max_position")),
             ("has_velocity_limits", ("max_velocity",)),
             ("has_acceleration_limits", ("max_acceleration",)),
             ("has_jerk_limits", ("max_jerk",)))
    for flag, fields in pairs:
        enabled = entry.get(flag, False)
        if not isinstance(enabled, bool):
            raise LimitsError(f"{path}: joint_limits.{joint}.{flag} must be true or false")
        if not enabled:
            continue
        for field in fields:
            value = entry.get(field)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise LimitsError(f"{path}: joint_limits.{joint}.{field} must be a number "
                                  f"when {flag} is true, got {value!r}")
            out[field] = float(value)
    return out


def _limits_section(path: str, data: object) -> Mapping[str, object]:
    """The ``joint_limits`` mapping, at the top or under ``<node>.ros__parameters``."""
    if isinstance(data, Mapping) and "joint_limits" in data:
        section = data["joint_limits"]
    else:
        nested = [v["ros__parameters"]["joint_limits"] for v in (
            data.values() if isinstance(data, Mapping) else ())
            if isinstance(v, Mapping) and isinstance(v.get("ros__parameters"), Mapping)
            and "joint_limits" in v["ros__parameters"]]
        if len(nested) != 1:
            raise LimitsError(f"{path}: no joint_limits mapping (expected 'joint_limits:' "
                              "at the top or under '<node>: ros__parameters:')")
        section = nested[0]
    if not isinstance(section, Mapping):
        raise LimitsError(f"{path}: joint_limits must map joint names to limits")
    return section


def limits_from_yaml(path: str | Path, joint_names: Sequence[str]) -> CommandLimits:
    """Read a ros2_control ``joint_limits`` YAML file for the joints ``joint_names``.

    The file maps joint names to ``has_position_limits``, ``min_position``,
    ``max_position``, ``has_velocity_limits``, ``max_velocity``,
    ``has_acceleration_limits``, ``max_acceleration``, ``has_jerk_limits``,
    ``max_jerk`` (other keys, e.g. effort, are ignored); a limit applies only where its
    ``has_*`` flag is true. Joints the file does not name are not limited.

    Raises:
        LimitsError: On an unreadable file, a joint the robot does not have, a limit
            enabled without a number, or contradicting limits; the message names the
            file and the field.
    """
    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise LimitsError(f"{path}: cannot read joint limits: {exc}".splitlines()[0]) from None
    section = _limits_section(str(path), data)
    unknown = [str(j) for j in section if j not in joint_names]
    if unknown:
        raise LimitsError(f"{path}: joint_limits names joint(s) the robot does not have: "
                          f"{', '.join(unknown)} (joints: {', '.join(joint_names)})")
    dim = len(joint_names)
    values = {f: np.full(dim, math.inf) for f in (
        "max_position", "max_velocity", "max_acceleration", "max_jerk")}
    values["min_position"] = np.full(dim, -math.inf)
    for i, joint in enumerate(joint_names):
        if joint in section:
            for field, value in _joint_entry(str(path), joint, section[joint]).items():
                values[field][i] = value
    limits = CommandLimits(values["min_position"], values["max_position"],
                           values["max_velocity"], values["max_acceleration"],
                           values["max_jerk"])
    try:
        limits.check(joint_names)
    except LimitsError as exc:
        raise LimitsError(f"{path}: {exc}") from None
    return limits
