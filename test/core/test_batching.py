"""Lanes and batch sizes shared by the engine's lanes and the simulator's batched GPU."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from xinfer_ros.core.batching import batch_sizes, lanes_for, next_batch_size


def test_lanes_hold_every_slot_in_batches_of_at_most_max_batch():
    assert [lanes_for(n, 4) for n in (1, 4, 5, 8, 9)] == [1, 1, 2, 2, 3]
    with pytest.raises(ValueError):
        lanes_for(4, 0)


def test_without_spreading_a_lane_takes_up_to_max_batch():
    assert next_batch_size(3, 4, 2, spread=False) == 3
    assert next_batch_size(9, 4, 2, spread=False) == 4


def test_spreading_no_more_units_than_lanes_each_run_alone():
    assert next_batch_size(2, 4, 2, spread=True) == 1
    assert next_batch_size(1, 4, 2, spread=True) == 1


def test_spreading_a_backlog_drains_in_even_shares():
    assert next_batch_size(5, 4, 2, spread=True) == 3
    assert next_batch_size(9, 4, 2, spread=True) == 4


@given(waiting=st.integers(1, 64), max_batch=st.integers(1, 8), lanes=st.integers(1, 4))
def test_a_batch_is_the_even_share_of_what_waits_up_to_max_batch(waiting, max_batch, lanes):
    """Spreading, a freed lane takes the even share of the waiting units over all lanes,
    at most max_batch; not spreading, as many as max_batch allows."""
    share = -(-waiting // lanes)
    assert next_batch_size(waiting, max_batch, lanes, spread=True) == min(max_batch, share)
    assert next_batch_size(waiting, max_batch, lanes, spread=False) == min(max_batch, waiting)


def test_calibration_splits_units_evenly_over_their_lanes():
    assert batch_sizes(5, 4) == [3, 2]
    assert batch_sizes(0, 4) == []
