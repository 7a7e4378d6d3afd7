"""How batched stage units map onto lanes: shared by the engine, calibration and simulator.

With ``max_batch`` > 1 a stage's ``slots`` concurrent units run in batches of at most
``max_batch`` on ``ceil(slots / max_batch)`` lanes (issue 16, item 3). Tight units
(``Launch.batch_limit``, issue 28) wait at the head of their stage's queue and batch
with tight units only: :func:`tight_end` and :func:`take_tight` are that queue
discipline, for the engine's ``BatchQueue`` and the simulator's batched GPU alike.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from typing import Protocol, TypeVar

__all__ = ["Tight", "batch_sizes", "lanes_for", "next_batch_size", "take_tight", "tight_end"]


class Tight(Protocol):
    """A queued unit: its ``limit`` is 0 (ordinary) or the most units of its forward."""

    @property
    def limit(self) -> int:
        """0, or (a tight unit) the most units its forward may hold."""
        ...


U = TypeVar("U", bound=Tight)


def lanes_for(units: int, max_batch: int) -> int:
    """Lanes that run ``units`` concurrent units in batches of at most ``max_batch``.

    Raises:
        ValueError: on ``max_batch`` below one.
    """
    if max_batch < 1:
        raise ValueError(f"max_batch must be >= 1, got {max_batch!r}")
    return -(-units // max_batch)


def next_batch_size(waiting: int, max_batch: int, lanes: int, *, spread: bool) -> int:
    """Units a freed lane takes from ``waiting`` ordinary units of its stage.

    At most ``max_batch``. When the oldest unit was launched spreading (an unsaturated
    saturation switch, ``Policy.spreads_lanes``), at most ``ceil(waiting / lanes)`` over
    all the stage's ``lanes``, busy or not: with no more units waiting than lanes each
    runs alone, and a backlog left from batching drains in even shares. The engine's
    ``BatchQueue`` and the simulator's batched GPU both size batches here.
    """
    size = min(max_batch, waiting)
    return min(size, lanes_for(waiting, lanes)) if spread else size


def tight_end(waiting: Sequence[Tight]) -> int:
    """Where the tight units at the head of ``waiting`` end: a tight unit queues there."""
    at = 0
    while at < len(waiting) and waiting[at].limit:
        at += 1
    return at


def take_tight(waiting: deque[U], max_batch: int,
               mate: Callable[[U, U], bool] | None = None) -> tuple[list[U], int]:
    """Pop the tight unit at the head of ``waiting`` and its tight mates; the forward's cap.

    Mates come from the tight units behind it, in order, while the forward stays within
    every member's limit and ``max_batch``; ``mate(first, unit)`` (default: any) may
    refuse one. Units passed over keep their places. The cap is the smallest of those
    bounds over the members.
    """
    first = waiting.popleft()
    units, cap = [first], min(first.limit, max_batch)
    kept: list[U] = []
    while waiting and waiting[0].limit and len(units) < cap:
        unit = waiting.popleft()
        if len(units) < unit.limit and (mate is None or mate(first, unit)):
            units.append(unit)
            cap = min(cap, unit.limit)
        else:
            kept.append(unit)
    waiting.extendleft(reversed(kept))
    return units, cap


def batch_sizes(units: int, max_batch: int) -> list[int]:
    """An even split of ``units`` over :func:`lanes_for` lanes (calibration's batches)."""
    lanes = lanes_for(units, max_batch)
    return [units // lanes + (i < units % lanes) for i in range(lanes)] if units else []
