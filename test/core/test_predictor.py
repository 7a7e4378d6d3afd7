"""Predictor (Eq. 8–10): isolated durations, progress integration, clipping, R_j(n)."""

from __future__ import annotations

import pytest

from xinfer_ros.core import Predictor, ProgressTracker, Request, Stage, default_rate_table
from xinfer_ros.core.constants import H_OUT, H_STAGE, W_STAGE
from xinfer_ros.core.errors import SchedulerStateError


@pytest.fixture
def tracker() -> ProgressTracker:
    return ProgressTracker(Predictor(default_rate_table()))


def mk(rid: int) -> Request:
    return Request(rid, "r", arrival=0.0, budget=0.4)


@pytest.mark.parametrize("stage", list(Stage))
def test_running_stage_alone_finishes_at_isolated_duration(tracker, stage):
    r = mk(1)
    unit = tracker.start(r, stage, 1.0)
    iso = H_STAGE[stage] + W_STAGE[stage]
    n = tracker.counts
    assert tracker.residual(unit, 1.0, n) == pytest.approx(iso)
    assert tracker.residual(unit, 1.0 + 0.4 * iso, n) == pytest.approx(0.6 * iso)
    assert tracker.residual(unit, 1.0 + iso, n) == pytest.approx(0.0, abs=1e-12)
    assert tracker.residual(unit, 1.0 + 2 * iso, n) == 0.0


def test_remaining_time_shrinks_at_the_calibrated_rate(tracker):
    pred = tracker.predictor
    a, b = mk(1), mk(2)
    ua = tracker.start(a, Stage.ACTION, 0.0)
    t1 = H_STAGE[2] + 0.002                # 2 ms of isolated work done
    tracker.start(b, Stage.VIT, t1)         # now a co-running ViT slows Action
    rho = pred.rate(Stage.ACTION, (1, 0, 0))
    assert rho < 1.0
    t2 = t1 + 0.003
    expected_work = 0.002 + rho * 0.003
    assert tracker.work_done(ua, t2) == pytest.approx(expected_work)
    n = tracker.counts                        # (1, 0, 1): includes a's own unit
    assert tracker.residual(ua, t2, n) == pytest.approx((W_STAGE[2] - expected_work) / rho)
    # While the load is unchanged, the wall-clock residual falls 1:1 with time.
    r2 = tracker.residual(ua, t2, n)
    r3 = tracker.residual(ua, t2 + 0.001, n)
    assert r2 - r3 == pytest.approx(0.001)
    # The rate for the remaining work follows the supplied load, not the history.
    heavier = (1, 3, 3)
    assert tracker.residual(ua, t2, heavier) == pytest.approx(
        (W_STAGE[2] - expected_work) / pred.rate(Stage.ACTION, (1, 3, 2)))
    # After b finishes, a runs at the isolated rate again.
    tracker.finish(2, t2)
    assert tracker.work_done(ua, t2 + 0.001) == pytest.approx(expected_work + 0.001)


def test_work_before_compute_start_is_zero(tracker):
    unit = tracker.start(mk(1), Stage.VIT, 0.0)
    assert tracker.work_done(unit, H_STAGE[0] / 2) == 0.0
    assert tracker.residual(unit, H_STAGE[0] / 2, tracker.counts) == pytest.approx(
        H_STAGE[0] / 2 + W_STAGE[0])


def test_lookups_clip_to_bounds():
    pred = Predictor(default_rate_table())
    c = pred.bounds
    for s in Stage:
        assert pred.rate(s, (c[0] + 5, c[1] + 9, c[2] + 1)) == pred.rate(s, c)
        assert pred.rate(s, (-1, -2, 0)) == pred.rate(s, (0, 0, 0)) == 1.0
        assert pred.q(s, (99, 99, 99)) == pytest.approx(
            H_STAGE[s] + W_STAGE[s] / pred.rate(s, c))
    assert pred.rate(Stage.ACTION, (c[0], 0, 0)) < pred.rate(Stage.ACTION, (c[0] - 1, 0, 0))


def test_remaining_pipeline_sums_later_stages_plus_h_out(tracker):
    pred = tracker.predictor
    r = mk(1)
    n = (1, 2, 1)
    q = [pred.q(s, n) for s in Stage]
    assert tracker.remaining(r, 0.0, n) == pytest.approx(H_OUT + sum(q))
    unit = tracker.start(r, Stage.VIT, 0.0)
    n_run = (1, 2, 1)  # includes r's own ViT
    assert tracker.remaining(r, 0.0, n_run) == pytest.approx(
        tracker.residual(unit, 0.0, n_run) + q[1] + q[2] + H_OUT)
    # The running stage's own unit is removed from its rate lookup only.
    assert tracker.residual(unit, 0.0, n_run) == pytest.approx(
        H_STAGE[0] + W_STAGE[0] / pred.rate(Stage.VIT, (0, 2, 1)))


def test_isolated_prediction_is_the_paper_pipeline():
    pred = Predictor(default_rate_table())
    assert pred.suffix((0, 0, 0))[0] == pytest.approx(sum(H_STAGE) + sum(W_STAGE) + H_OUT)
    assert pred.suffix((0, 0, 0))[0] == pytest.approx(30.003e-3, abs=1e-6)


def test_tracker_rejects_impossible_transitions(tracker):
    r = mk(1)
    tracker.start(r, Stage.VIT, 0.0)
    with pytest.raises(SchedulerStateError, match="request 1 already runs VIT"):
        tracker.start(r, Stage.PREFILL, 0.0)
    with pytest.raises(SchedulerStateError, match="request 7 has no running unit"):
        tracker.finish(7, 0.0)


def test_restart_counts_only_the_time_a_unit_runs(tracker):
    """A unit that waited after its launch (a formed batch, issue 28) restarts with no work."""
    pred = tracker.predictor
    unit = tracker.start(mk(1), Stage.ACTION, 0.0)
    tracker.start(mk(2), Stage.VIT, 0.0)  # a load that the restart must not change
    counts = list(tracker.counts)
    waited = 0.010
    assert tracker.work_done(unit, waited) > 0.0  # integrated while it only waited
    tracker.restart(1, waited)
    assert tracker.counts == counts
    assert tracker.work_done(unit, waited + H_STAGE[2]) == 0.0
    n = tracker.counts
    assert tracker.residual(unit, waited, n) == pytest.approx(
        H_STAGE[2] + W_STAGE[2] / pred.rate(Stage.ACTION, (1, 0, 0)))
    with pytest.raises(SchedulerStateError):
        tracker.restart(3, waited)


def test_a_deferred_unit_starts_now_at_every_prediction_until_restarted(tracker):
    pred = tracker.predictor
    unit = tracker.start(mk(1), Stage.PREFILL, 0.0)
    tracker.defer(1)
    n = tracker.counts
    alone = H_STAGE[1] + W_STAGE[1]
    for t in (0.0, 0.010, 0.050):  # waiting: no work, the issue overhead still ahead
        assert tracker.work_done(unit, t) == 0.0
        assert tracker.residual(unit, t, n) == pytest.approx(alone)
        assert tracker.snapshot(t)[1] == (pytest.approx(H_STAGE[1]), pytest.approx(W_STAGE[1]),
                                          Stage.PREFILL)
    tracker.restart(1, 0.050)
    assert tracker.residual(unit, 0.050 + H_STAGE[1] + 0.001, n) == pytest.approx(
        W_STAGE[1] - 0.001)
    assert pred.rate(Stage.PREFILL, (0, 0, 0)) == 1.0
    with pytest.raises(SchedulerStateError):
        tracker.defer(2)


def test_a_deferred_unit_that_never_started_teaches_the_correction_nothing():
    from xinfer_ros.core.rate_correction import CorrectionSettings, RateCorrection

    pred = Predictor(default_rate_table())
    corr = RateCorrection(CorrectionSettings(min_samples=1, deadband=0.0))
    pred.set_correction(corr)
    tracker = ProgressTracker(pred)
    tracker.start(mk(1), Stage.ACTION, 0.0)
    tracker.defer(1)
    assert not tracker.record_completion(1, 0.5)
    tracker.restart(1, 0.5)
    # Ran three times as long as the table says: that is learnt.
    assert tracker.record_completion(1, 0.5 + H_STAGE[2] + 3 * W_STAGE[2])
