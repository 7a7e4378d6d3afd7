"""Running-stage prediction audit (App. C.2): causal and resolved at stage ends."""

from __future__ import annotations

import sys

from xinfer_ros.core.prediction_audit import PredictionAudit, PredictionSample
from xinfer_ros.core.rate_correction import RateCorrection
from xinfer_ros.core.rate_table import default_rate_table
from xinfer_ros.core.registry import make_policy
from xinfer_ros.core.request import Request
from xinfer_ros.core.stages import Stage
from xinfer_ros.engine import EngineConfig
from xinfer_ros.model.inputs import RequestInputs

from .helpers import make_engine


def _policy():  # type: ignore[no-untyped-def]
    return make_policy("fifo", slots=(4, 4, 6), rate_table=default_rate_table())


def test_prediction_uses_only_observed_transitions() -> None:
    """A later launch (a future event at sampling time) cannot change a recorded forecast."""
    preds = []
    for extra in (False, True):
        policy = _policy()
        audit = PredictionAudit(period=0.0001)
        policy.on_arrival(Request(1, "a", 0.0, 1.0), 0.0)
        audit.maybe_sample(policy, 0.003)
        if extra:
            policy.on_arrival(Request(2, "b", 0.004, 1.0), 0.004)
        policy.complete(1, Stage.VIT, 0.010)
        audit.observe_end(1, Stage.VIT, 0.010)
        preds.append(audit.samples[0].predicted)
    assert preds[0] == preds[1]


def test_isolated_forecast_is_exact_for_table_times() -> None:
    table = default_rate_table()
    policy = _policy()
    audit = PredictionAudit(period=0.0001)
    policy.on_arrival(Request(1, "a", 0.0, 1.0), 0.0)
    audit.maybe_sample(policy, 0.001)
    end = table.overhead[0] + table.work[0]
    policy.complete(1, Stage.VIT, end)
    audit.observe_end(1, Stage.VIT, end)
    (sample,) = audit.samples
    assert abs(sample.error) < 1e-9
    summary = audit.summary()
    assert summary["samples"] == 1 and summary["mae_ms"] < 1e-6


def _slow_device_audit(correction: bool) -> tuple[dict, RateCorrection | None]:
    """Requests whose every stage takes 1.6x the table's work, served in waves of 3."""
    config = EngineConfig(slots=(4, 4, 6), rate_correction=correction, sample_period_s=0.002)
    # Real time, not the helpers' compressed clock: on a loaded 2-core machine a thread
    # wakes milliseconds late, which compression would turn into a slower "device".
    engine, _ = make_engine("fifo", config, scale=1.0)
    try:
        for wave in range(12):
            futs = [engine.submit(RequestInputs(work_factor=1.6), 5.0, f"r{wave}-{i}")
                    for i in range(3)]
            assert all(f.result(10.0).ok for f in futs)
    finally:
        engine.close()
    return engine.audit.summary(), engine.rate_correction


def test_engine_learns_a_slower_device_and_predicts_better() -> None:
    on, corr = _slow_device_audit(True)
    off, none = _slow_device_audit(False)
    assert none is None
    assert corr is not None
    for k in corr.factors:
        # Interference between the wave's units is in the table, so each factor is
        # the work factor, up to the threads' wake-up jitter.
        assert 1.3 < k < 2.2
    assert off["mean_error_ms"] > 0  # uncorrected: systematically too short
    assert on["mae_ms"] < 0.6 * off["mae_ms"]


def test_audit_keeps_only_its_latest_forecasts() -> None:
    """A long-running engine's audit stays bounded; its summary describes the latest."""
    policy = _policy()
    audit = PredictionAudit(period=0.0001, max_samples=50)
    t = 0.0
    for rid in range(1, 2001):
        policy.on_arrival(Request(rid, "a", t, 1.0), t)
        audit.maybe_sample(policy, t + 0.001)
        t += 0.1
        policy.complete(rid, Stage.VIT, t)
        audit.observe_end(rid, Stage.VIT, t)
        audit.drop(rid)
        policy.remove_request(rid, t)
    assert len(audit.samples) == 50
    assert audit.samples[-1].request_id == 2000
    assert audit.summary()["samples"] == 50


def test_engine_audit_is_bounded() -> None:
    engine, _ = make_engine("fifo", EngineConfig(slots=(4, 4, 6)))
    try:
        assert engine.audit.samples.maxlen is not None
        assert engine.audit.output_samples.maxlen == engine.audit.samples.maxlen
    finally:
        engine.close()


def test_a_full_audit_holds_no_more_memory_than_an_empty_one() -> None:
    """Its bounded stores are allocated at start, so a soak's memory stays flat."""
    audit = PredictionAudit(max_samples=1000)
    sample = PredictionSample(1, Stage.VIT, 0.0, 0.01, 0.012, 0.02)
    audit.samples.append(sample)
    before = sys.getallocatedblocks()
    for _ in range(5000):
        audit.samples.append(sample)
        audit.output_samples.append(sample)
    assert sys.getallocatedblocks() - before < 500
    assert len(audit.samples) == 1000 and audit.samples[-1] == sample
