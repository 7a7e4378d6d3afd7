"""Online rate correction: convergence, bounds, warm-up, dead-band, predictor wiring."""

from __future__ import annotations

import math
import random

import pytest

from xinfer_ros.core import Predictor, ProgressTracker, Request, Stage, default_rate_table
from xinfer_ros.core.rate_correction import CorrectionSettings, RateCorrection


def test_converges_to_a_true_slowdown_under_noise() -> None:
    rng = random.Random(7)
    corr = RateCorrection()
    for _ in range(300):
        # Log-normal jitter of 20 % around a 1.7x slower Action and a 0.6x faster ViT.
        corr.observe(Stage.ACTION, 1.7 * math.exp(rng.gauss(0.0, 0.2)))
        corr.observe(Stage.VIT, 0.6 * math.exp(rng.gauss(0.0, 0.2)))
    k_v, k_p, k_a = corr.factors
    assert k_a == pytest.approx(1.7, rel=0.12)
    assert k_v == pytest.approx(0.6, rel=0.12)
    assert k_p == 1.0  # no Prefill observation: untouched


def test_follows_a_step_change_within_a_few_dozen_units() -> None:
    corr = RateCorrection()
    for _ in range(50):
        corr.observe(Stage.PREFILL, 1.0)
    for _ in range(30):
        corr.observe(Stage.PREFILL, 2.0)
    assert corr.factors[Stage.PREFILL] == pytest.approx(2.0, rel=0.05)


def test_warm_up_uses_equal_weights_and_publishes_at_min_samples() -> None:
    corr = RateCorrection(CorrectionSettings(min_samples=4))
    changed = [corr.observe(Stage.ACTION, x) for x in (2.0, 2.0, 0.5)]
    assert changed == [False, False, False]
    assert corr.factors == (1.0, 1.0, 1.0)
    assert corr.observe(Stage.ACTION, 1.0) is True
    # Geometric mean of 2, 2, 0.5, 1 = 2 ** (1/4): no pull towards the prior 1.
    assert corr.factors[Stage.ACTION] == pytest.approx(2.0 ** 0.25)


def test_stays_bounded_and_ignores_invalid_observations() -> None:
    corr = RateCorrection(CorrectionSettings(bounds=(0.5, 3.0), min_samples=1))
    for _ in range(100):
        corr.observe(Stage.VIT, 1e6)
        corr.observe(Stage.ACTION, 1e-9)
    assert corr.factors[Stage.VIT] == pytest.approx(3.0)
    assert corr.factors[Stage.ACTION] == pytest.approx(0.5)
    before = corr.summary()
    for bad in (0.0, -1.0, math.nan, math.inf):
        assert corr.observe(Stage.PREFILL, bad) is False
    assert corr.summary() == before


def test_dead_band_suppresses_small_republishing() -> None:
    corr = RateCorrection(CorrectionSettings(min_samples=1, alpha=0.5, deadband=0.05))
    assert corr.observe(Stage.VIT, 1.5) is True
    assert corr.observe(Stage.VIT, 1.52) is False  # estimate moves < 5 %
    assert corr.factors[Stage.VIT] == pytest.approx(1.5)
    assert corr.observe(Stage.VIT, 3.0) is True
    corr.reset()
    assert corr.factors == (1.0, 1.0, 1.0) and corr.samples == [0, 0, 0]


@pytest.mark.parametrize("kwargs", [{"alpha": 0.0}, {"alpha": 1.5}, {"min_samples": 0},
                                    {"bounds": (1.2, 2.0)}, {"bounds": (0.5, math.inf)},
                                    {"deadband": -0.1}])
def test_invalid_settings_are_refused(kwargs: dict) -> None:
    with pytest.raises(ValueError):
        CorrectionSettings(**kwargs)


# -- wiring through the predictor ---------------------------------------------------------
def _run_units(tracker: ProgressTracker, stage: Stage, slowdown: float, count: int,
               t0: float = 0.0) -> float:
    """Run ``count`` units of ``stage`` alone, each ``slowdown`` x its isolated time."""
    pred = tracker.predictor
    t = t0
    iso = pred.isolated_base_duration(stage)
    for rid in range(1000, 1000 + count):
        tracker.start(Request(rid, "r", arrival=t, budget=1.0), stage, t)
        end = t + pred.h[stage] + slowdown * pred.base_work[stage]
        tracker.record_completion(rid, end)
        tracker.finish(rid, end)
        t = end + 0.1 * iso
    return t


def test_tracker_learns_a_uniform_slowdown_and_corrects_the_tables() -> None:
    table = default_rate_table()
    plain = Predictor(table)
    tracker = ProgressTracker(Predictor(table, correction=RateCorrection()))
    t = _run_units(tracker, Stage.ACTION, 1.5, 20)
    pred = tracker.predictor
    assert pred.correction is not None
    assert pred.correction.factors[Stage.ACTION] == pytest.approx(1.5, rel=1e-6)
    n = (1, 2, 3)
    h, w = table.overhead[2], table.work[2]
    assert pred.q(Stage.ACTION, n) == pytest.approx(h + 1.5 * w / plain.rate(Stage.ACTION, n))
    assert pred.q(Stage.VIT, n) == plain.q(Stage.VIT, n)
    assert pred.suffix(n)[2] == pytest.approx(pred.h_out + pred.q(Stage.ACTION, n))
    # A new unit's residual is now its corrected duration, and it is exact for a
    # unit that again runs 1.5x slower than the table.
    unit = tracker.start(Request(1, "r", arrival=t, budget=1.0), Stage.ACTION, t)
    true_end = t + h + 1.5 * w
    mid = t + 0.4 * (true_end - t)
    assert tracker.residual(unit, mid, tracker.counts) == pytest.approx(true_end - mid)


def test_aborts_and_removals_do_not_feed_the_correction() -> None:
    corr = RateCorrection(CorrectionSettings(min_samples=1))
    tracker = ProgressTracker(Predictor(default_rate_table(), correction=corr))
    tracker.start(Request(1, "r", arrival=0.0, budget=1.0), Stage.VIT, 0.0)
    tracker.finish(1, 0.0)  # aborted at its launch instant
    assert corr.samples == [0, 0, 0]
    tracker.start(Request(2, "r", arrival=0.0, budget=1.0), Stage.VIT, 0.0)
    assert tracker.record_completion(2, 0.0) is False  # no work integrated yet
    assert corr.samples == [0, 0, 0]


def test_off_switch_gives_the_calibrated_predictions_exactly() -> None:
    table = default_rate_table()
    plain = Predictor(table)
    corr = RateCorrection()
    tracker = ProgressTracker(Predictor(table, correction=corr))
    _run_units(tracker, Stage.PREFILL, 2.0, 20)
    pred = tracker.predictor
    assert pred.q_tab != plain.q_tab
    pred.set_correction(None)
    assert pred.work == plain.work
    assert pred.q_tab == plain.q_tab and pred.suffix_tab == plain.suffix_tab
    assert pred.inv_own == plain.inv_own
    # Without a correction, record_completion is a no-op.
    tracker.start(Request(5, "r", arrival=100.0, budget=1.0), Stage.VIT, 100.0)
    assert tracker.record_completion(5, 100.5) is False
    # A correction that has not warmed up keeps the calibrated tables too.
    fresh = Predictor(table, correction=RateCorrection())
    assert fresh.q_tab == plain.q_tab and fresh.suffix_tab == plain.suffix_tab


def test_dispersion_measures_the_spread_of_the_observations_not_their_level() -> None:
    rng = random.Random(3)
    steady, noisy = RateCorrection(), RateCorrection()
    for _ in range(400):
        steady.observe(Stage.ACTION, 1.6)
        noisy.observe(Stage.ACTION, 1.6 * math.exp(rng.gauss(0.0, 0.2)))
    assert steady.dispersion == (0.0, 0.0, 0.0)
    # |N(0, 0.2)| has mean 0.2 * sqrt(2 / pi) ~= 0.16 in log space; the EWMA of the last
    # dozen or so has a standard deviation of ~0.035 around it.
    assert 0.06 < math.log1p(noisy.dispersion[Stage.ACTION]) < 0.27
    assert noisy.dispersion[:2] == (0.0, 0.0)
    assert noisy.summary()["dispersion"] == list(noisy.dispersion)
    noisy.reset()
    assert noisy.dispersion == (0.0, 0.0, 0.0)
