"""FloatRing: the latest rows, oldest first, in storage allocated once."""

from __future__ import annotations

import sys

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from xinfer_ros.core.ring import FloatRing


@given(maxlen=st.one_of(st.none(), st.integers(1, 40)), count=st.integers(0, 3000))
def test_a_ring_holds_the_latest_rows_like_a_bounded_deque(maxlen: int | None,
                                                           count: int) -> None:
    ring = FloatRing(2, maxlen)
    rows = [(float(i), -float(i)) for i in range(count)]
    for row in rows:
        ring.append(row)
    kept = rows[-maxlen:] if maxlen is not None else rows
    kept = kept if count else []
    assert len(ring) == len(kept)
    assert ring.rows().tolist() == [list(r) for r in kept]
    if kept:
        assert ring.row(0).tolist() == list(kept[0])
        assert ring.row(-1).tolist() == list(kept[-1])
        last = ring.last()
        assert last is not None and last.tolist() == list(kept[-1])
    else:
        assert ring.last() is None
    with pytest.raises(IndexError):
        ring.row(len(kept))


def test_a_bounded_ring_does_not_grow_the_process_as_it_fills() -> None:
    ring = FloatRing(6, 4096)
    before = sys.getallocatedblocks()
    for i in range(10_000):
        ring.append((i, 0.5, 1.5, 2.5, 3.5, np.nan))
    # A deque of records would hold some 5 objects a row here (24,000 blocks).
    assert sys.getallocatedblocks() - before < 500
    assert len(ring) == 4096 and ring.row(0)[0] == 10_000 - 4096


def test_bad_shapes_are_refused() -> None:
    with pytest.raises(ValueError, match="width"):
        FloatRing(0)
    with pytest.raises(ValueError, match="maxlen"):
        FloatRing(3, 0)
