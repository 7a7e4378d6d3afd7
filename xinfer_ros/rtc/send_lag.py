"""Lateness of the executor's Eq. 1 sends (no ROS, no torch).

When a chunk answering request ``j`` arrives at ``r_j``, the executor schedules the next
request for ``max(s_j + T_E, r_j)`` (Eq. 1) and arms a one-shot timer. The request goes
out some time after that target (timer wake-up and executor latency); this module keeps
the statistics of that lag, which calibrate the fleet simulator's ``send_jitter``.
"""

from __future__ import annotations

import math
from collections import deque

import numpy as np

__all__ = ["DEFAULT_WINDOW", "SendLagStats"]

#: Lags kept for the P95 (the most recent ones).
DEFAULT_WINDOW = 256


class SendLagStats:
    """Cumulative count, mean and max of send lags, and a P95 over a recent window.

    Args:
        window: How many of the most recent lags the P95 is computed over.

    Raises:
        ValueError: If ``window`` is not positive.
    """

    def __init__(self, window: int = DEFAULT_WINDOW) -> None:
        if window <= 0:
            raise ValueError(f"window must be positive, got {window}")
        self.count = 0
        self._sum_s = 0.0
        self._max_s = 0.0
        self._recent: deque[float] = deque(maxlen=window)

    def record(self, lag_s: float) -> float:
        """Record one send's lag behind its target time.

        Args:
            lag_s: Actual send time minus target time (s). Tiny negative values (the
                send was decided a hair before the target on another clock reading)
                count as 0.

        Returns:
            The lag recorded (s), after clamping.

        Raises:
            ValueError: If ``lag_s`` is not finite.
        """
        if not math.isfinite(lag_s):
            raise ValueError(f"send lag must be finite, got {lag_s}")
        lag = max(0.0, float(lag_s))
        self.count += 1
        self._sum_s += lag
        self._max_s = max(self._max_s, lag)
        self._recent.append(lag)
        return lag

    @property
    def mean_ms(self) -> float:
        """Mean lag over every send recorded (ms); 0 before the first."""
        return self._sum_s / self.count * 1e3 if self.count else 0.0

    @property
    def p95_ms(self) -> float:
        """95th percentile of the recent window (ms); 0 before the first send."""
        if not self._recent:
            return 0.0
        return float(np.percentile(np.fromiter(self._recent, dtype=float), 95)) * 1e3

    @property
    def max_ms(self) -> float:
        """Largest lag recorded (ms); 0 before the first send."""
        return self._max_s * 1e3
