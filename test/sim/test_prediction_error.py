"""Prediction error as a simulator input: the error model, its calibration, the audit."""

from __future__ import annotations

import math

import pytest

from xinfer_ros.sim.engine_loop import SimConfig, simulate
from xinfer_ros.sim.prediction_error import (
    SYSTEMATIC_SHARE,
    PredictionErrorTargetError,
    calibrate,
    error_model,
)

SHORT = SimConfig(robots=12, duration=25.0, window=(5.0, 25.0))


def test_error_model_splits_one_size_between_consistent_and_spread_parts() -> None:
    noise, rate_error = error_model(0.3)
    assert rate_error == pytest.approx(0.3 * SYSTEMATIC_SHARE)
    assert math.hypot(noise, rate_error) == pytest.approx(0.3)
    assert error_model(0.0) == (0.0, 0.0)
    with pytest.raises(ValueError):
        error_model(-0.1)


def test_calibration_finds_the_size_for_the_target_and_refuses_the_impossible() -> None:
    def measure(cfg: SimConfig, size: float) -> float:
        return 0.9 + 10.0 * size  # MAE grows with the size from a floor

    found = calibrate(SHORT, 2.4, measure=measure)
    assert found.size == pytest.approx(0.15, abs=0.002)
    assert found.mae_ms == pytest.approx(2.4, abs=0.03) and found.floor_ms == 0.9
    assert (found.noise, found.rate_error) == error_model(found.size)
    assert "MAE 2.4" in found.describe() and "12 robots" in found.describe()
    with pytest.raises(PredictionErrorTargetError, match="below"):
        calibrate(SHORT, 0.5, measure=measure)
    with pytest.raises(PredictionErrorTargetError, match="beyond"):
        calibrate(SHORT, 100.0, measure=measure)


def test_the_audit_measures_without_changing_a_decision() -> None:
    plain = simulate(SHORT)
    audited = simulate(SHORT.with_(audit=True))
    assert audited.metrics == plain.metrics and audited.policy_calls == plain.policy_calls
    assert plain.prediction is None
    prediction = audited.prediction
    assert prediction is not None and prediction["samples"] > 1000
    assert 0.0 < prediction["mae_ms"] < 5.0
    # A table that misjudges the GPU more is audited as a larger error.
    worse = simulate(SHORT.with_(audit=True, noise=0.2, rate_error=0.1)).prediction
    assert worse is not None and worse["mae_ms"] > prediction["mae_ms"] + 0.5
    assert audited.to_dict()["prediction"] == prediction


def test_calibration_refuses_nonsense_before_simulating() -> None:
    calls: list[float] = []

    def measure(cfg: SimConfig, size: float) -> float:
        calls.append(size)
        return math.nan

    for bad in (0.0, -1.0, math.nan):
        with pytest.raises(PredictionErrorTargetError, match="> 0"):
            calibrate(SHORT, bad, measure=measure)
    assert calls == []
    with pytest.raises(PredictionErrorTargetError, match="no prediction was audited"):
        calibrate(SHORT, 2.0, measure=measure)
