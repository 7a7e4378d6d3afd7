"""Batch costs from rate tables with a batch dimension (issue 28, item 2)."""

from __future__ import annotations

import pytest

from xinfer_ros.config_paths import config_dir
from xinfer_ros.core import Predictor, default_rate_table
from xinfer_ros.core.batch_cost import BatchCost, check_batch_table, table_batch_bound
from xinfer_ros.core.errors import RateTableError
from xinfer_ros.core.rate_table import load_rate_table
from xinfer_ros.core.stages import Stage

BATCH4 = config_dir() / "rate_table_cpu_pi0_tiny_batch4.json"
UNBATCHED = config_dir() / "rate_table_cpu_pi0_tiny.json"


def test_batch_table_states_its_calibrated_batch_sizes():
    assert table_batch_bound(load_rate_table(BATCH4)) == (4, 4, 4)


@pytest.mark.parametrize("path", [UNBATCHED, None])
def test_table_without_batch_dimension_states_batch_one(path):
    table = load_rate_table(path) if path else default_rate_table()
    assert table_batch_bound(table) == (1, 1, 1)
    check_batch_table(table, 1, "t.json")  # batch size one is always costed


def test_batches_refused_on_table_without_batch_dimension_in_one_line():
    with pytest.raises(RateTableError) as exc:
        BatchCost(Predictor(load_rate_table(UNBATCHED)), 4, source=str(UNBATCHED))
    msg = str(exc.value)
    assert "\n" not in msg
    assert str(UNBATCHED) in msg and "--max-batch 4" in msg and "batch size 1 only" in msg


def test_batches_above_the_calibrated_size_are_refused():
    with pytest.raises(RateTableError, match="at most 4"):
        BatchCost(Predictor(load_rate_table(BATCH4)), 5)


def test_bad_calibrated_max_batch_is_an_error():
    table = load_rate_table(BATCH4)
    bad = type(table).from_json_dict({**table.to_json_dict(),
                                      "model": {"settings": {"max_batch": 0}}})
    with pytest.raises(RateTableError, match="max_batch"):
        table_batch_bound(bad)


@pytest.mark.parametrize("stage", list(Stage))
def test_batch_of_one_costs_the_lone_unit(stage):
    pred = Predictor(load_rate_table(BATCH4))
    cost = BatchCost(pred, 4)
    for n in [(0, 0, 0), (1, 0, 2), (3, 3, 3), (9, 9, 9)]:
        assert cost.duration(stage, 1, n) == pred.q(stage, n)


@pytest.mark.parametrize("stage", list(Stage))
def test_batch_of_k_costs_the_calibrated_cell_with_k_minus_one_mates(stage):
    table = load_rate_table(BATCH4)
    pred = Predictor(table)
    cost = BatchCost(pred, 4)
    for k in range(1, 5):
        mates = [0, 0, 0]
        mates[stage] = k - 1
        expect = table.overhead[stage] + table.work[stage] / table.rates[tuple(mates)][stage]
        assert cost.duration(stage, k, (0, 0, 0)) == pytest.approx(expect)
    assert cost.durations(stage, (1, 0, 1)) == tuple(
        cost.duration(stage, k, (1, 0, 1)) for k in range(1, 5))


def test_batching_four_action_units_beats_running_them_one_after_another():
    # What batching buys on the calibrated CPU: a batch of 4 is cheaper than 4 lone units.
    cost = BatchCost(Predictor(load_rate_table(BATCH4)), 4)
    d = cost.durations(Stage.ACTION, (0, 0, 0))
    assert d[3] < 4 * d[0]


def test_batch_size_outside_range_is_an_error():
    cost = BatchCost(Predictor(load_rate_table(BATCH4)), 2)
    with pytest.raises(ValueError, match=r"1\.\.2"):
        cost.duration(Stage.VIT, 3, (0, 0, 0))
