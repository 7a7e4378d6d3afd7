"""Per-connection rate limit of the openpi endpoint: a token bucket.

An openpi client sends one observation and waits for its reply, so its rate is bounded
by the inference latency; a client that streams messages without waiting (or floods
malformed ones, which are answered in microseconds) is refused without a decode, and
the server then reads nothing more from it until the bucket refills (TCP flow control
holds the flood in the client's socket), so a flood costs at most ``rate`` replies a
second.
"""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["TokenBucket"]


class TokenBucket:
    """``rate`` tokens per second, at most ``burst`` saved up (starts full).

    Args:
        rate: tokens added per second (> 0).
        burst: bucket size (>= 1): how many messages may arrive back to back.
        clock: monotonic clock in seconds (tests pass their own).
    """

    def __init__(self, rate: float, burst: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if not rate > 0 or not burst >= 1:
            raise ValueError(f"need rate > 0 and burst >= 1, got {rate} and {burst}")
        self.rate = float(rate)
        self.burst = float(burst)
        self._clock = clock
        self._tokens = self.burst
        self._last = clock()

    def _refill(self) -> None:
        now = self._clock()
        self._tokens = min(self.burst, self._tokens + (now - self._last) * self.rate)
        self._last = now

    def take(self, cost: float = 1.0) -> bool:
        """Spend ``cost`` tokens if there are enough; False (nothing spent) otherwise."""
        self._refill()
        if self._tokens < cost:
            return False
        self._tokens -= cost
        return True

    def wait_s(self, cost: float = 1.0) -> float:
        """Seconds until ``cost`` tokens (at most ``burst``) are there; 0 when they are."""
        self._refill()
        return max(0.0, min(cost, self.burst) - self._tokens) / self.rate
