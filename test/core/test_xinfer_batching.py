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


def policy(max_batch: int = 4, **kwargs: object) -> XInferPolicy:
    return XInferPolicy(rate_table=BATCH4, slots=(4, 4, 8), max_batch=max_batch,
                        **kwargs)  # type: ignore[arg-type]


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


def test_a_launched_unit_does_no_work_until_its_batch_starts():
    p = policy(defer_batched_units=True)
    ids = launched(p, [2.0, 2.0])
    dur = p.batch_cost.durations(0, (0, 0, 0))  # type: ignore[union-attr]
    launch = p.remaining_time(ids[0], 0.0)
    # It waited 4 ms (held for mates, or behind a busy lane): still all to do.
    assert p.remaining_time(ids[0], 0.004) == pytest.approx(launch)
    p.start_batch(Stage.VIT, ids, 0.004)
    assert p.remaining_time(ids[0], 0.004) == pytest.approx(launch)
    assert p.remaining_time(ids[0], 0.005) == pytest.approx(launch - 0.001)
    # From its start, the unit's ViT is the whole batch: two units on one lane.
    rest = p.predictor.suffix(p.tracker.counts)[1]
    assert launch - rest == pytest.approx(dur[1], rel=1e-6)
    with pytest.raises(SchedulerStateError):
        p.start_batch(Stage.PREFILL, ids, 0.005)


@pytest.mark.parametrize("max_batch", [1, 4])
def test_by_default_units_run_from_their_launch(max_batch):
    p = policy(max_batch)
    ids = launched(p, [2.0, 2.0])
    before = p.remaining_time(ids[0], 0.001)
    assert before == pytest.approx(p.remaining_time(ids[0], 0.0) - 0.001)
    p.start_batch(Stage.VIT, ids, 0.001)  # checks the ids, changes no prediction
    assert p.remaining_time(ids[0], 0.001) == before


def _robot_due(p: XInferPolicy, budget: float) -> float:
    """A robot with ``budget`` sends at 0.05 s and 0.06 s (each answered at once).

    Returns when its next send is forecast (one window over its two sends later).
    """
    for t in (0.05, 0.06):
        [rid] = launched(p, [budget], t=t)
        for s in Stage:  # the Action completion answers it
            p.on_complete(rid, s, t + 0.001 * (s + 1))
        assert rid not in p.requests
    return 0.06 + p.forecaster.window / 2


@pytest.mark.parametrize("spare", [0.001, 1.0])
def test_a_batch_leaves_a_robot_due_during_it_its_slack(spare):
    """With forecast_batch_guard, formation guards forecast arrivals as protected requests."""
    p = policy(forecast_batch_guard=True)
    dur = p.batch_cost.durations(0, (0, 0, 0))  # type: ignore[union-attr]
    reserve = p.delta + p.frontend_reserve
    # Its spare time, b - δ - f - R_V, at the load of the others and its own ViT unit.
    budget = reserve + p.predictor.suffix((1, 0, 0))[0] + spare
    due = _robot_due(p, budget)
    # Launched before the robot is due (admission, which forecasts it, lets them all
    # through); a lane comes free for them once it is due: its ViT would find the lane
    # busy while a batch of four runs.
    ids = launched(p, [2.0] * 4, t=due - 0.010)
    assert len(ids) == 4
    t = due + p.frontend_reserve - 0.001
    plan = p.plan_batch(Stage.VIT, ids, t)
    # Each parameter takes its branch: 1 ms is short of a full batch's extra time, 1 s not.
    assert (spare < dur[-1] - dur[0]) == (spare == 0.001)
    if spare < dur[-1] - dur[0]:
        assert len(plan.members) < 4
        assert plan.duration - dur[0] <= spare
        p.forecast_batch_guard = False  # the default: the robot about to send is not seen
        assert len(p.plan_batch(Stage.VIT, ids, t).members) == 4
    else:
        assert len(plan.members) == 4
