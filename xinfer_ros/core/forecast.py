"""Arrival forecaster for arrival-aware admission (paper §4.4, App. C.1).

Recent arrivals are grouped by their observed budget (no robot identities, no
predefined tight/wide classes). For a budget seen ``k > 0`` times in the rolling window
``P`` ending at ``t``, forecasts start at ``max(t, a_last + P/k)`` and repeat every ``P/k``.
"""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass

from xinfer_ros.core.constants import ARRIVAL_WINDOW
from xinfer_ros.core.timing import deadline, next_send

__all__ = ["ArrivalForecaster", "Forecast"]


@dataclass(frozen=True, slots=True)
class Forecast:
    """One forecast arrival: expected server arrival time and its budget (s)."""

    arrival: float
    budget: float


class ArrivalForecaster:
    """Rolling per-budget arrival history and the forecasts it implies.

    Args:
        window: P, the rolling window (s).
        budget_resolution: budgets closer than this (s) form one group; 1 µs by default
            so float noise in equal budgets does not split a group.
    """

    __slots__ = ("_groups", "_res", "window")

    def __init__(self, window: float = ARRIVAL_WINDOW, budget_resolution: float = 1e-6) -> None:
        if not window > 0:
            raise ValueError(f"forecast window must be > 0 s, got {window!r}")
        self.window = float(window)
        self._res = float(budget_resolution)
        # key -> (budget, deque of arrival times in increasing order)
        self._groups: dict[int, tuple[float, deque[float]]] = {}

    def observe(self, arrival: float, budget: float) -> None:
        """Record one server arrival at its own time.

        Arrivals usually come in order; one reported after a later one (the engine
        prepares requests on several CPU workers) is put in its place, so every policy
        sees each request at its true arrival and deadline. Arrivals older than the
        window are forgotten here too, so the history stays bounded for every policy,
        including those that never ask for forecasts.
        """
        self.prune(arrival)
        key = round(budget / self._res)
        g = self._groups.get(key)
        if g is None:
            self._groups[key] = (budget, deque((arrival,)))
        elif not g[1] or arrival >= g[1][-1]:
            g[1].append(arrival)
        else:
            bisect.insort(g[1], arrival)

    def prune(self, t: float) -> None:
        """Forget arrivals at or before ``t − P`` and groups that became empty."""
        horizon = t - self.window
        dead = None
        for key, (_, times) in self._groups.items():
            while times and times[0] <= horizon:
                times.popleft()
            if not times:
                dead = [*dead, key] if dead else [key]
        if dead:
            for key in dead:
                del self._groups[key]

    def groups(self, t: float) -> list[tuple[float, int, float]]:
        """``(budget, k, a_last)`` per budget group in the window ending at ``t``."""
        self.prune(t)
        return [(b, len(times), times[-1]) for b, times in self._groups.values()]

    def iter_forecasts(self, t: float, until: float) -> Iterator[tuple[float, float]]:
        """Yield ``(arrival, budget)`` forecasts with ``t <= arrival <= until``, per group.

        Call :meth:`prune` first (``groups`` does); ordering is per group, not global.
        """
        window = self.window
        for budget, times in self._groups.values():
            k = len(times)
            if not k:
                continue
            period = window / k
            a = times[-1] + period
            a = max(a, t)
            while a <= until:
                yield a, budget
                a += period

    def between(self, t: float, until: float, delta: float) -> list[tuple[float, float, float]]:
        """Every forecast in ``[t, until]`` as ``(arrival, arrival + budget − delta, budget)``.

        Unsorted; this is the policy's hot path. Call :meth:`prune` first.
        """
        out: list[tuple[float, float, float]] = []
        window = self.window
        for budget, times in self._groups.values():
            period = window / len(times)
            # The next arrival under Eq. 1 with its response still awaited at t.
            a = next_send(times[-1], t, period)
            while a <= until:
                out.append((a, deadline(a, budget, delta), budget))
                a += period
        return out

    def forecasts(self, t: float, until: float) -> list[Forecast]:
        """All forecasts arriving in ``[t, until]``, sorted by arrival then budget."""
        self.prune(t)
        out = [Forecast(a, b) for a, b in self.iter_forecasts(t, until)]
        out.sort(key=lambda f: (f.arrival, f.budget))
        return out
