"""The XInfer policy decides which launched units run as one batch (issue 28, item 1)."""

from __future__ import annotations

import pytest

from xinfer_ros.config_paths import config_dir
from xinfer_ros.core import Request, Stage
from xinfer_ros.core.errors import RateTableError, SchedulerStateError
from xinfer_ros.core.rate_table import load_rate_table
from xinfer_ros.core.xinfer_policy import XInferPolicy

BATCH4 = load_rate_table(config_dir() / "rate_table_cpu_pi0_tiny_batch4.json")
UNBATCHED = load_rate_table(config_dir() / "rate_table_cpu_pi0_tiny.json")


def launched(policy: XInferPolicy, budgets: list[float], t: float = 0.0) -> list[int]:
    """Arrive one request per budget at ``t``; the ids of the ViT units launched."""
    ids = []
    for rid, budget in enumerate(budgets, start=len(policy.requests)):
        out = policy.on_arrival(Request(rid, f"r{rid}", arrival=t, budget=budget), t)
        ids += [x.request_id for x in out.launches if x.stage == Stage.VIT]
    return ids


def policy(max_batch: int = 4) -> XInferPolicy:
    return XInferPolicy(rate_table=BATCH4, slots=(4, 4, 8), max_batch=max_batch)


def test_relaxed_units_launched_together_run_as_one_batch_within_their_deadlines():
    p = policy()
    ids = launched(p, [2.0] * 4)
    assert len(ids) == 4
    plan = p.plan_batch(Stage.VIT, ids, 0.0)
    assert plan.members == tuple(ids) and plan.runs_now(0.0)
    for rid in plan.members:
        r = p.requests[rid]
        assert plan.duration + p.remaining_time(rid, 0.0) - p.predictor.q(0, (0, 0, 0)) \
            < r.deadline


def test_a_lone_relaxed_unit_waits_for_mates_at_most_its_own_duration():
    p = policy()
    ids = launched(p, [2.0])
    plan = p.plan_batch(Stage.VIT, ids, 0.0)
    assert plan.members == tuple(ids)
    assert 0.0 < plan.start_by <= p.predictor.q(0, (0, 0, 0)) + 1e-12


def test_without_holds_a_lone_relaxed_unit_runs_now_and_mates_still_batch():
    from xinfer_ros.core.registry import forms_batches, make_policy

    p = make_policy("xinfer_batch_nohold", rate_table=BATCH4, slots=(4, 4, 8))
    assert isinstance(p, XInferPolicy) and forms_batches("xinfer-batch-nohold")
    assert not p.batch_hold and p.batch_cost is not None
    ids = launched(p, [2.0])
    assert p.plan_batch(Stage.VIT, ids, 0.0).runs_now(0.0)
    ids += launched(p, [2.0] * 3)
    plan = p.plan_batch(Stage.VIT, ids, 0.0)
    assert plan.members == tuple(ids) and plan.runs_now(0.0)


def test_a_tight_unit_is_not_held_and_keeps_its_deadline():
    p = policy()
    # Just enough budget to finish alone (plus δ): a batch of four would make it late.
    # It arrives last, behind three relaxed units launched before it.
    ids = launched(p, [2.0, 2.0, 2.0])
    ids += launched(p, [BATCH4.isolated_request_s + p.delta + 0.001])
    assert len(ids) == 4
    dur = p.batch_cost.durations(0, (0, 0, 0))  # type: ignore[union-attr]
    rest = p.predictor.suffix((0, 0, 0))[1]
    tight = p.requests[ids[3]]
    assert dur[3] + rest > tight.deadline  # a full batch would make it late
    plan = p.plan_batch(Stage.VIT, ids, 0.0)
    assert plan.runs_now(0.0)
    assert plan.members[0] == ids[3] and len(plan.members) < 4
    assert plan.duration + rest <= tight.deadline


def test_unbatched_policy_runs_the_oldest_unit_alone_now():
    p = XInferPolicy(rate_table=BATCH4, slots=(4, 4, 8))
    ids = launched(p, [2.0] * 3)
    plan = p.plan_batch(Stage.VIT, ids, 0.0)
    assert plan.members == (ids[0],) and plan.runs_now(0.0)


def test_batching_with_a_table_without_batch_dimension_is_refused_at_construction():
    with pytest.raises(RateTableError, match="batch size 1 only"):
        XInferPolicy(rate_table=UNBATCHED, max_batch=4)


def test_plan_for_a_unit_not_launched_is_an_error():
    p = policy()
    ids = launched(p, [2.0])
    with pytest.raises(SchedulerStateError):
        p.plan_batch(Stage.ACTION, ids, 0.0)
    with pytest.raises(SchedulerStateError):
        p.plan_batch(Stage.VIT, [99], 0.0)


def test_a_lone_unit_past_vit_waits_for_mates_only_while_one_may_come():
    p = policy()
    [a] = launched(p, [2.0])
    out = p.on_complete(a, Stage.VIT, 0.003)
    assert [(x.request_id, x.stage) for x in out.launches] == [(a, Stage.PREFILL)]
    # Nobody upstream of Prefill: waiting could only delay it.
    assert p.plan_batch(Stage.PREFILL, [a], 0.003).runs_now(0.003)
    [b] = launched(p, [2.0], t=0.004)  # a mate on its way
    assert b != a
    assert not p.plan_batch(Stage.PREFILL, [a], 0.004).runs_now(0.004)
