"""BatchAudit: formed batches' predicted against observed durations (issue 28)."""

from __future__ import annotations

import math

import pytest

from xinfer_ros.core.batch_audit import BatchAudit
from xinfer_ros.core.stages import Stage


def test_summary_is_per_stage_and_size_with_means_in_ms_and_the_median_ratio() -> None:
    audit = BatchAudit()
    audit.record(Stage.ACTION, 1, 0.050, 1.0, 1.050)
    audit.record(Stage.ACTION, 4, 0.080, 2.0, 2.120)
    audit.record(Stage.ACTION, 4, 0.080, 3.0, 3.100)
    audit.record(Stage.ACTION, 4, 0.080, 4.0, 4.080)
    audit.record(Stage.PREFILL, 2, 0.010, 5.0, 5.009)
    out = audit.summary()
    assert list(out) == ["prefill", "action"]
    assert list(out["action"]) == ["1", "4"]
    four = out["action"]["4"]
    assert four["batches"] == 3
    assert four["predicted_ms"] == pytest.approx(80.0)
    assert four["observed_ms"] == pytest.approx(100.0)
    assert four["ratio_median"] == pytest.approx(1.25)
    assert out["action"]["1"]["ratio_median"] == pytest.approx(1.0)
    assert out["prefill"]["2"]["ratio_median"] == pytest.approx(0.9)


def test_batches_outside_the_window_and_without_a_prediction_are_not_counted() -> None:
    audit = BatchAudit()
    audit.keep_from, audit.keep_until = 10.0, 20.0
    audit.record(Stage.VIT, 1, 0.005, 9.99, 10.01)  # started before the window
    audit.record(Stage.VIT, 1, 0.005, 20.0, 20.01)  # at its end
    audit.record(Stage.VIT, 2, math.nan, 12.0, 12.01)  # a plan that fell back
    audit.record(Stage.VIT, 2, 0.0, 12.0, 12.01)
    audit.record(Stage.VIT, 2, 0.005, 12.0, 11.9)  # no forward
    assert audit.summary() == {}
    audit.record(Stage.VIT, 3, 0.005, 15.0, 15.006)
    assert audit.summary()["vit"]["3"]["batches"] == 1


def test_a_long_run_keeps_counting_while_its_ratio_memory_stays_bounded() -> None:
    audit = BatchAudit()
    for i in range(10_000):
        # The first half 2x slow, the second exact: the median follows the latest.
        audit.record(Stage.ACTION, 2, 0.05, float(i), i + (0.1 if i < 5_000 else 0.05))
    cell = audit.summary()["action"]["2"]
    assert cell["batches"] == 10_000
    assert cell["ratio_median"] == pytest.approx(1.0)
    assert cell["observed_ms"] == pytest.approx(75.0)


def test_lags_around_the_forward_are_kept_apart_from_its_duration() -> None:
    audit = BatchAudit()
    audit.record(Stage.ACTION, 2, 0.060, 1.002, 1.062, formed=1.000, seen=1.065)
    audit.record(Stage.ACTION, 2, 0.060, 2.0, 2.060)  # no lags given: none counted
    cell = audit.summary()["action"]["2"]
    assert cell["observed_ms"] == pytest.approx(60.0)
    assert cell["start_lag_ms"] == pytest.approx(1.0)  # (2 + 0) / 2
    assert cell["report_lag_ms"] == pytest.approx(1.5)
