"""The gate between the policy's commands and the arm: engage ramp and limits (no ROS).

Every command the executor sends passes :meth:`CommandGate.step`, one control tick at a
time:

- **Engage.** When commanding (re)starts (on activation, after a halt or a watchdog
  stop) the gate blends from where the robot is (its measured joint positions, or the
  command it last held) into the policy's commands over ``engage_ramp_s``: at the
  ``k``-th tick of the ramp it sends ``from + α (policy − from)`` with
  ``α = k / n``, ``n`` the ramp's ticks. The robot is taken to be at rest there, so
  the acceleration (and jerk) limits shape the start too. While the ramp runs the
  limits clamp whatever ``limit_action`` says (the ramp is the gate), and it ends once
  the blend is complete and a command passes unclamped.
- **Limits** (:class:`xinfer_ros.rtc.limits.CommandLimits`): after the ramp a command
  that breaks one is clamped (``limit_action: clamp``) or refused (``stop``: the
  executor stops commanding until it is activated again).

:meth:`CommandGate.preview` runs the same steps on a copy, for the keyframes of a joint
trajectory, so a trajectory never carries what a tick would not send.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from enum import Enum

import numpy as np
import numpy.typing as npt

from xinfer_ros.rtc.limits import CommandLimits, LimitsError

__all__ = ["CommandGate", "GateStep", "LimitAction"]

FloatArray = npt.NDArray[np.float64]


class LimitAction(str, Enum):
    """What a command breaking a limit leads to (after the engage ramp)."""

    CLAMP = "clamp"  #: send the nearest command within the limits
    STOP = "stop"  #: send nothing and stop commanding until activated again


@dataclass(frozen=True)
class GateStep:
    """One tick through the gate.

    Attributes:
        command: What to send (``None``: nothing, the command was refused).
        broken: The limits the wanted command broke (``LIMIT_KINDS`` names).
        engaging: The tick lay within the engage ramp.
    """

    command: FloatArray | None
    broken: tuple[str, ...]
    engaging: bool


@dataclass
class _Motion:
    """The last command sent and its finite-difference velocity and acceleration."""

    position: FloatArray | None = None
    velocity: FloatArray | None = None
    acceleration: FloatArray | None = None

    def advance(self, command: FloatArray, dt: float) -> None:
        if self.position is not None and self.velocity is not None:
            velocity = (command - self.position) / dt
            self.acceleration = (velocity - self.velocity) / dt
            self.velocity = velocity
        elif self.position is not None:
            self.velocity = (command - self.position) / dt
        self.position = command.copy()


@dataclass
class CommandGate:
    """Engage ramp and command limits of one robot; see the module docstring.

    Args:
        limits: The joint limits.
        dt: Control tick Δ (s).
        engage_ramp_s: Length of the engage blend (s, > 0).
        action: What breaking a limit after the ramp does.

    Raises:
        LimitsError: If ``engage_ramp_s`` or ``dt`` is not positive.
    """

    limits: CommandLimits
    dt: float
    engage_ramp_s: float
    action: LimitAction = LimitAction.CLAMP
    _motion: _Motion = field(default_factory=_Motion, init=False)
    _from: FloatArray | None = field(default=None, init=False)
    _ramp_tick: int = field(default=-1, init=False)  # ticks into the ramp; -1: none
    #: Commands clamped, refused (stop), and the limits broken most recently.
    clamps: int = field(default=0, init=False)
    stops: int = field(default=0, init=False)
    last_broken: tuple[str, ...] = field(default=(), init=False)

    def __post_init__(self) -> None:
        if not (math.isfinite(self.engage_ramp_s) and self.engage_ramp_s > 0.0):
            raise LimitsError(f"engage_ramp_s must be > 0, got {self.engage_ramp_s}")
        if not self.dt > 0.0:
            raise LimitsError(f"the control tick must be > 0, got {self.dt}")

    @property
    def ramp_ticks(self) -> int:
        """Ticks the engage blend takes (at least one)."""
        return max(1, math.ceil(self.engage_ramp_s / self.dt - 1e-9))

    @property
    def engaging(self) -> bool:
        """An engage ramp has begun or is due and has not finished."""
        return self._ramp_tick >= 0

    @property
    def last_sent(self) -> FloatArray | None:
        """The command sent most recently (``None`` before any)."""
        return None if self._motion.position is None else self._motion.position.copy()

    def engage(self, measured: FloatArray | None) -> None:
        """Start a ramp from ``measured`` (or, without it, from the last command sent).

        The robot is taken to be at rest there. Without either the first command is
        sent as the policy gives it (position bounds applied) and the ramp blends
        nothing.
        """
        start = measured if measured is not None else self._motion.position
        self._from = None if start is None else np.asarray(start, dtype=np.float64).copy()
        self._motion = _Motion(self._from)
        if self._from is not None:
            zeros = np.zeros_like(self._from)
            self._motion.velocity, self._motion.acceleration = zeros, zeros.copy()
        self._ramp_tick = 0

    def hold(self, command: FloatArray) -> None:
        """Record a command sent outside the gate (the measured joints before a chunk)."""
        self._motion = _Motion(np.asarray(command, dtype=np.float64).copy())

    def step(self, wanted: FloatArray) -> GateStep:
        """Shape the policy's command for this tick; updates the ramp and the counters."""
        out = self._shape(wanted)
        self.last_broken = out.broken or self.last_broken
        if out.command is None:
            self.stops += 1
        elif out.broken:
            self.clamps += 1
        return out

    def preview(self, rows: FloatArray) -> FloatArray | None:
        """What :meth:`step` would send for ``rows`` (one per tick), without sending.

        Returns ``None`` if a row would be refused.
        """
        shadow = copy.deepcopy(self)
        out = np.empty_like(rows, dtype=np.float64)
        for i, row in enumerate(rows):
            command = shadow._shape(row).command
            if command is None:
                return None
            out[i] = command
        return out

    def _shape(self, wanted: FloatArray) -> GateStep:
        engaging = self._ramp_tick >= 0
        command = np.asarray(wanted, dtype=np.float64)
        alpha = 1.0
        if engaging:
            self._ramp_tick += 1
            alpha = min(1.0, self._ramp_tick / self.ramp_ticks)
            if self._from is not None:
                command = self._from + alpha * (command - self._from)
        m, dt = self._motion, self.dt
        broken = tuple(self.limits.violations(command, m.position, m.velocity,
                                              m.acceleration, dt))
        if broken:
            if not engaging and self.action == LimitAction.STOP:
                return GateStep(None, broken, engaging)
            command = self.limits.clamp(command, m.position, m.velocity, m.acceleration, dt)
        elif alpha >= 1.0:
            # The ramp ends once the blend is complete and the command, no longer
            # clamped, follows the policy.
            self._ramp_tick = -1
        m.advance(command, dt)
        return GateStep(command.copy(), broken, engaging)
