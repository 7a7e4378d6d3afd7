"""A ring of fixed-width float rows, allocated once (no per-record Python objects).

Statistics that a server keeps for days (the prediction audit, the serving ledger)
hold their latest records in a ring. A ``deque`` of dataclasses grows the process by
a few small objects per record until the bound is reached, which on a long-running
server takes tens of minutes: memory measured over a two-minute soak then rises
although nothing leaks. A :class:`FloatRing` with a bound takes its whole size at
construction, so the process's memory is flat from its first request; without a
bound (a finite simulation) it doubles as it fills.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["FloatRing"]

#: Rows allocated at first for a ring without a bound; it doubles when full.
_INITIAL_ROWS = 1024


class FloatRing:
    """The latest ``maxlen`` rows of ``width`` floats, oldest first.

    Args:
        width: floats per row.
        maxlen: rows kept, the latest (None: every row, the storage doubling as it fills).

    Raises:
        ValueError: on a width or bound below 1.
    """

    def __init__(self, width: int, maxlen: int | None = None) -> None:
        if width < 1:
            raise ValueError(f"width must be >= 1, got {width!r}")
        if maxlen is not None and maxlen < 1:
            raise ValueError(f"maxlen must be >= 1 or None, got {maxlen!r}")
        self.maxlen = maxlen
        rows = maxlen if maxlen is not None else _INITIAL_ROWS
        self._data = np.full((rows, width), np.nan)
        self._next = 0    # where the next row goes
        self._count = 0   # rows held

    def __len__(self) -> int:
        return self._count

    def append(self, row: Sequence[float]) -> None:
        """Add a row; with a bound, the oldest row gives way once the ring is full."""
        if self.maxlen is None and self._count == len(self._data):
            # Never wrapped without a bound: rows 0 .. count - 1, in order.
            self._data = np.concatenate([self._data, np.full_like(self._data, np.nan)])
            self._next = self._count
        self._data[self._next] = row
        self._next = (self._next + 1) % len(self._data)
        self._count = min(self._count + 1, len(self._data))

    def row(self, index: int) -> np.ndarray:
        """One row by age (0: the oldest held, -1: the latest), a copy."""
        if not -self._count <= index < self._count:
            raise IndexError(f"row {index} of a ring holding {self._count}")
        index %= self._count
        start = self._next - self._count
        row: np.ndarray = self._data[(start + index) % len(self._data)].copy()
        return row

    def rows(self) -> np.ndarray:
        """Every row held, oldest first: a ``(len, width)`` copy."""
        if self._count < len(self._data):  # not yet wrapped: rows 0 .. count - 1
            return self._data[:self._count].copy()
        return np.concatenate([self._data[self._next:], self._data[:self._next]])

    def last(self) -> np.ndarray | None:
        """The latest row (a copy), or None when empty."""
        return self.row(-1) if self._count else None
