"""Executor-side real-time chunking: the action queue and chunk splicing.

Time on the robot is counted in keyframe ticks of spacing Δ. A request sent at tick
``s`` carries the planned actions from tick ``s`` on (the aligned previous chunk) and a
commit length ``d``: the server freezes the first ``d`` keyframes of the new chunk to
them, so the new chunk's keyframe ``i`` belongs to tick ``s + i``. When the chunk
arrives at tick ``r`` it is spliced at the current execution index: keyframes before
``r`` are already history and are dropped, never replayed (Appendix B.1).

A chunk that arrives after its planned handoff ``s + d`` is a handoff violation; it is
still aligned and applied from ``r``. A chunk with nothing left at or after ``r`` is
stale and discarded. When the queue runs dry the executor holds its last command and
counts starvation. A trigger miss is counted when ``s_j + T_E`` passes while request
``j`` is still in flight (Eq. 1).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

import numpy as np
import numpy.typing as npt

from xinfer_ros.errors import XInferRosError

__all__ = [
    "ActionQueue",
    "ExecutorCounters",
    "SpliceError",
    "SpliceOutcome",
    "SpliceResult",
]

FloatArray = npt.NDArray[np.float64]


class SpliceError(XInferRosError, ValueError):
    """A chunk cannot be spliced (bad shape or bad tick arithmetic)."""


class SpliceOutcome(str, Enum):
    """What happened to a returned chunk."""

    ON_TIME = "on_time"  #: arrived at or before its planned handoff s + d
    LATE = "late"  #: arrived after s + d; applied from the current tick
    STALE = "stale"  #: nothing of it lies at or after the current tick; dropped
    OUT_OF_ORDER = "out_of_order"  #: older than the chunk already in the queue; dropped


@dataclass(frozen=True)
class SpliceResult:
    """The outcome of :meth:`ActionQueue.splice`.

    Attributes:
        outcome: On time, late, stale or out of order.
        applied_from: Index into the chunk of the first keyframe that was queued
            (``None`` when the chunk was dropped).
        lateness_ticks: ``r - (s + d)``; positive for a handoff violation.
        discontinuity: Max abs difference between the last executed command and the
            first applied keyframe (0 when nothing was executed yet or dropped).
    """

    outcome: SpliceOutcome
    applied_from: int | None
    lateness_ticks: int
    discontinuity: float


@dataclass
class ExecutorCounters:
    """Counters of Appendix B.1, reported by the executor."""

    ticks: int = 0
    starved_ticks: int = 0
    handoff_violations: int = 0
    stale_chunks: int = 0
    trigger_misses: int = 0
    chunks_applied: int = 0


class ActionQueue:
    """Actions indexed by absolute keyframe tick, spliced from successive chunks.

    Args:
        action_dim: Number of joints ``D``.
        initial_command: Command held before the first chunk arrives.
    """

    def __init__(self, action_dim: int, initial_command: FloatArray | None = None) -> None:
        if action_dim <= 0:
            raise SpliceError(f"action_dim must be positive, got {action_dim}")
        self.action_dim = action_dim
        self.counters = ExecutorCounters()
        self._actions = np.zeros((0, action_dim))
        self._first_tick = 0  # tick of self._actions[0]
        self._origin_tick = -1  # send tick of the request whose chunk is queued
        if initial_command is None:
            initial_command = np.zeros(action_dim)
        self._last_command = self._check_vector(initial_command, "initial_command")

    @property
    def origin_tick(self) -> int:
        """Send tick of the request whose chunk is queued (-1 before the first one).

        It identifies the chunk the commands come from.
        """
        return self._origin_tick

    @property
    def last_command(self) -> FloatArray:
        """The command executed most recently (or the initial command)."""
        return self._last_command.copy()

    def remaining(self, tick: int) -> int:
        """Number of queued keyframes at or after ``tick``."""
        return max(0, self._first_tick + len(self._actions) - tick)

    def planned(self, tick: int, horizon: int) -> FloatArray:
        """The aligned previous chunk for a request sent at ``tick``.

        Returns ``horizon`` keyframes starting at ``tick``; past the end of the queue the
        last planned (or last executed) command is repeated, which is what the robot
        would do if no new chunk arrived.
        """
        if horizon <= 0:
            raise SpliceError(f"horizon must be positive, got {horizon}")
        start = max(0, tick - self._first_tick)
        ahead = self._actions[start:]
        fill = ahead[-1] if len(ahead) else self._last_command
        out = np.empty((horizon, self.action_dim))
        n = min(horizon, len(ahead))
        out[:n] = ahead[:n]
        out[n:] = fill
        return out

    def splice(self, chunk: FloatArray, send_tick: int, now_tick: int,
               commit_steps: int) -> SpliceResult:
        """Splice a chunk answered for a request sent at ``send_tick``.

        Args:
            chunk: ``(H, D)`` keyframes; keyframe ``i`` belongs to tick ``send_tick + i``.
            send_tick: Tick at which the request was sent.
            now_tick: Current execution tick (the next tick to execute).
            commit_steps: The request's commit length ``d``.

        Returns:
            What was applied; the counters are updated.

        Raises:
            SpliceError: On a chunk of the wrong shape or a send tick in the future.
        """
        chunk = np.asarray(chunk, dtype=np.float64)
        if chunk.ndim != 2 or chunk.shape[1] != self.action_dim or len(chunk) == 0:
            raise SpliceError(
                f"chunk must have shape (H, {self.action_dim}), got {chunk.shape}")
        if not np.all(np.isfinite(chunk)):
            raise SpliceError("chunk contains NaN or Inf")
        if send_tick > now_tick:
            raise SpliceError(f"send_tick {send_tick} is after now_tick {now_tick}")
        lateness = now_tick - (send_tick + commit_steps)
        if send_tick < self._origin_tick:
            return SpliceResult(SpliceOutcome.OUT_OF_ORDER, None, lateness, 0.0)
        offset = now_tick - send_tick
        if offset >= len(chunk):
            self.counters.stale_chunks += 1
            return SpliceResult(SpliceOutcome.STALE, None, lateness, 0.0)
        applied = chunk[offset:]
        jump = float(np.max(np.abs(applied[0] - self._last_command)))
        if self.counters.ticks == 0:
            jump = 0.0
        self._actions = applied.copy()
        self._first_tick = now_tick
        self._origin_tick = send_tick
        self.counters.chunks_applied += 1
        if lateness > 0:
            self.counters.handoff_violations += 1
            outcome = SpliceOutcome.LATE
        else:
            outcome = SpliceOutcome.ON_TIME
        return SpliceResult(outcome, offset, lateness, jump)

    def pop(self, tick: int) -> tuple[FloatArray, bool]:
        """Return the command for ``tick`` and whether the queue was starved.

        A starved tick holds the last command.
        """
        self.counters.ticks += 1
        index = tick - self._first_tick
        if 0 <= index < len(self._actions):
            self._last_command = self._actions[index].copy()
            return self._last_command.copy(), False
        self.counters.starved_ticks += 1
        return self._last_command.copy(), True

    def record_trigger_miss(self) -> None:
        """Count one trigger miss (``s_j + T_E`` passed with request ``j`` in flight)."""
        self.counters.trigger_misses += 1

    def clear(self) -> None:
        """Forget queued actions (for example after a server restart); keep the hold."""
        self._actions = np.zeros((0, self.action_dim))
        self._origin_tick = -1

    def _check_vector(self, value: FloatArray, name: str) -> FloatArray:
        arr = np.asarray(value, dtype=np.float64)
        if arr.shape != (self.action_dim,):
            raise SpliceError(f"{name} must have shape ({self.action_dim},), got {arr.shape}")
        return arr.copy()
