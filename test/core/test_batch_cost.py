"""Batch costs from rate tables with a batch dimension (issue 28, item 2)."""

from __future__ import annotations

import pytest

from xinfer_ros.config_paths import config_dir
from xinfer_ros.core import Predictor, default_rate_table
from xinfer_ros.core.batch_cost import (
    BatchCost,
    batch_factors,
    check_batch_table,
    table_batch_bound,
)
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


# -- batch factors (xinfer-calibrate --batch-factors) ----------------------------------

FACTORS = {"V": [1.0, 1.5, 2.0, 2.5], "P": [1.0, 1.25, 1.5, 1.75], "A": [1.0, 1.1, 1.2, 1.3]}


def factors_table(factors: object = None, max_batch: int = 4):
    """The unbatched CPU table's cells with batch factors, as --batch-factors writes it."""
    table = load_rate_table(UNBATCHED)
    settings = {"max_batch": max_batch, "batch_factors": FACTORS if factors is None else factors}
    return type(table).from_json_dict({**table.to_json_dict(), "model": {"settings": settings}})


def test_with_factors_every_stage_costs_batches_up_to_n_whatever_its_bound():
    table = factors_table()
    assert min(table.bounds) < 3  # even-split cells would stop at c_s + 1
    assert table_batch_bound(table) == (4, 4, 4)
    assert batch_factors(table) == (tuple(FACTORS["V"]), tuple(FACTORS["P"]),
                                    tuple(FACTORS["A"]))
    assert batch_factors(load_rate_table(BATCH4)) is None


@pytest.mark.parametrize("stage", list(Stage))
def test_with_factors_a_batch_costs_its_factor_of_the_unbatched_cell_of_the_others(stage):
    table = factors_table()
    pred = Predictor(table)
    cost = BatchCost(pred, 4)
    h = table.overhead[stage]
    for n in [(0, 0, 0), (1, 0, 1), (2, 2, 2), (9, 9, 9)]:
        # Batch size one is exactly what unbatched XInfer predicts for a unit there.
        assert cost.duration(stage, 1, n) == pred.q(stage, n)
        for k in range(1, 5):
            f = FACTORS[stage.short][k - 1]
            expect = h + f * (pred.q(stage, n) - h)  # mates do not enter n
            assert cost.duration(stage, k, n) == pytest.approx(expect)
        assert cost.durations(stage, n) == pytest.approx(
            tuple(cost.duration(stage, k, n) for k in range(1, 5)))
    # A smaller max_batch reads the first factors only.
    assert len(BatchCost(pred, 2).durations(stage, (0, 0, 0))) == 2


def test_with_factors_the_online_correction_scales_batches_as_it_scales_units():
    from xinfer_ros.core.rate_correction import RateCorrection

    pred = Predictor(factors_table())
    cost = BatchCost(pred, 4)
    before = cost.durations(Stage.ACTION, (0, 0, 0))
    correction = RateCorrection()
    for _ in range(64):
        correction.observe(Stage.ACTION, 2.0)  # the device runs Action at half speed
    pred.set_correction(correction)
    after = cost.durations(Stage.ACTION, (0, 0, 0))
    assert after[3] > before[3] and after[3] == pytest.approx(
        cost.duration(Stage.ACTION, 4, (0, 0, 0)))


@pytest.mark.parametrize("bad", [
    {"V": [1.0, 1.5, 2.0], "P": [1.0, 1.2, 1.4, 1.6], "A": [1.0, 1.1, 1.2, 1.3]},  # short
    {"V": [1.2, 1.5, 2.0, 2.5], "P": [1.0, 1.2, 1.4, 1.6], "A": [1.0, 1.1, 1.2, 1.3]},
    {"V": [1.0, 1.5, 2.0, -1], "P": [1.0, 1.2, 1.4, 1.6], "A": [1.0, 1.1, 1.2, 1.3]},
    {"V": [1.0, 1.5, 2.0, 2.5], "P": [1.0, 1.2, 1.4, 1.6]},  # a stage missing
    [1.0, 1.5, 2.0, 2.5],
])
def test_bad_batch_factors_are_refused_in_one_line_at_start(bad):
    table = factors_table(bad)
    with pytest.raises(RateTableError) as exc:
        BatchCost(Predictor(table), 4)
    assert "\n" not in str(exc.value) and "batch_factors" in str(exc.value)


def test_a_table_file_with_bad_batch_factors_is_refused_when_read(tmp_path):
    from xinfer_ros.core.rate_table import _dumps

    bad = {"V": [1.0, 1.5], "P": [1.0, 1.2, 1.4, 1.6], "A": [1.0, 1.1, 1.2, 1.3]}
    path = tmp_path / "t.json"
    path.write_text(_dumps(factors_table(bad).to_json_dict()), encoding="utf-8")
    with pytest.raises(RateTableError) as exc:
        load_rate_table(path)  # whichever policy would read it, batching or not
    assert str(path) in str(exc.value) and "\n" not in str(exc.value)


@pytest.mark.parametrize("path", ["factors", "cells"])
def test_feedback_scales_batches_until_the_plans_match_the_forwards(path):
    """Batches that run 0.7x their plan: the stage's costs converge to 0.7x, others keep."""
    pred = Predictor(factors_table() if path == "factors" else load_rate_table(BATCH4))
    cost = BatchCost(pred, 4)
    n = (1, 0, 1)
    before = cost.durations(Stage.ACTION, n)
    assert cost.scale == (1.0, 1.0, 1.0)
    for i in range(200):
        k = 1 + i % 4
        predicted = cost.duration(Stage.ACTION, k, n)  # what a plan would have used
        cost.observe(Stage.ACTION, predicted, 0.7 * before[k - 1])
    assert cost.scale[2] == pytest.approx(0.7, rel=0.03)
    assert cost.scale[:2] == (1.0, 1.0)
    after = cost.durations(Stage.ACTION, n)  # the memo was dropped with the old scale
    assert after == pytest.approx(tuple(0.7 * d for d in before), rel=0.03)
    assert cost.duration(Stage.ACTION, 3, n) == pytest.approx(after[2])
    assert cost.durations(Stage.VIT, n) == pytest.approx(
        tuple(cost.duration(Stage.VIT, k, n) for k in range(1, 5)))


def test_feedback_ignores_observations_without_a_duration():
    cost = BatchCost(Predictor(factors_table()), 4)
    for bad in [(0.0, 0.05), (0.05, 0.0), (float("nan"), 0.05), (0.05, float("inf"))]:
        for _ in range(20):
            cost.observe(Stage.ACTION, *bad)
    assert cost.scale == (1.0, 1.0, 1.0) and not cost.feedback
    assert cost.feedback_summary() is None


def test_feedback_by_size_learns_each_batch_size_from_its_own_batches():
    """Singles run as planned, pairs 0.8x, full batches 0.6x; triples never ran."""
    cost = BatchCost(Predictor(factors_table()), 4, by_size=True)
    n = (0, 0, 1)
    before = cost.durations(Stage.ACTION, n)
    ran = {1: 1.0, 2: 0.8, 4: 0.6}
    for i in range(300):
        k = (1, 2, 4)[i % 3]
        cost.observe(Stage.ACTION, cost.duration(Stage.ACTION, k, n), ran[k] * before[k - 1], k)
    scales = [c[2] for c in cost.scales]
    assert scales == pytest.approx([1.0, 0.8, 1.0, 0.6], rel=0.03)
    assert cost.scale == cost.scales[0] and all(c[:2] == (1.0, 1.0) for c in cost.scales)
    after = cost.durations(Stage.ACTION, n)
    assert after == pytest.approx(tuple(s * d for s, d in zip(scales, before, strict=True)))
    for bad in (0, 5):  # a size it cannot cost is ignored
        cost.observe(Stage.ACTION, 0.05, 0.5, bad)
    assert [c[2] for c in cost.scales] == scales
    # What the engine benchmark reports: the factors by size, and single units' summary.
    assert cost.size_factors() == {str(k): list(c) for k, c in enumerate(cost.scales, 1)}
    summary = cost.feedback_summary()
    assert summary is not None and summary["factors"] == list(cost.scale)


def test_pooled_feedback_applies_one_factor_to_every_size():
    cost = BatchCost(Predictor(factors_table()), 4)
    for _ in range(50):
        cost.observe(Stage.PREFILL, cost.duration(Stage.PREFILL, 3, (0, 0, 0)),
                     0.5 * cost.duration(Stage.PREFILL, 3, (0, 0, 0)) / cost.scale[1], 3)
    assert len(cost.feedback) == 1 and cost.size_factors() is None
    assert len({c for c in cost.scales}) == 1 and cost.scale[1] == pytest.approx(0.5, rel=0.05)
