"""Running-stage prediction audit (App. C.2): causal and resolved at stage ends."""

from __future__ import annotations

from xinfer_ros.core.rate_table import default_rate_table
from xinfer_ros.core.registry import make_policy
from xinfer_ros.core.request import Request
from xinfer_ros.core.stages import Stage
from xinfer_ros.engine.prediction import PredictionAudit


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
