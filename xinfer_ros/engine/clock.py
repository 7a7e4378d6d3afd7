"""The engine clock: monotonic seconds, optionally running faster than real time.

Only the emulated backend may run with ``scale > 1`` (tests and quick capacity
checks): every component that waits (the dispatcher's ticks, the emulated device,
closed-loop robots) converts engine seconds to wall seconds through the same clock,
so the whole system is time-compressed uniformly. Real model work cannot be
compressed, so the torch backend requires ``scale == 1``.
"""

from __future__ import annotations

import math
import threading
import time

__all__ = ["Clock"]


class Clock:
    """Engine time in seconds since construction, ``scale`` engine seconds per wall second.

    Args:
        scale: time-compression factor (> 0); 1 is real time.
    """

    def __init__(self, scale: float = 1.0) -> None:
        if not (scale > 0 and math.isfinite(scale)):
            raise ValueError(f"clock scale must be a finite number > 0, got {scale!r}")
        self.scale = float(scale)
        self._t0 = time.perf_counter()

    def now(self) -> float:
        """Current engine time (s)."""
        return (time.perf_counter() - self._t0) * self.scale

    def wall(self, dt: float) -> float:
        """Wall seconds corresponding to ``dt`` engine seconds (never negative)."""
        return max(dt, 0.0) / self.scale

    def sleep(self, dt: float) -> None:
        """Sleep ``dt`` engine seconds."""
        if dt > 0:
            time.sleep(dt / self.scale)

    def sleep_until(self, t: float) -> None:
        """Sleep until engine time ``t``."""
        self.sleep(t - self.now())

    def wait(self, cond: threading.Condition, dt: float | None) -> bool:
        """``cond.wait`` for ``dt`` engine seconds (None: forever); caller holds ``cond``."""
        return cond.wait(None if dt is None else self.wall(dt))
