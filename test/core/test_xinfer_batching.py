"""The XInfer policy decides which launched units run as one batch (issue 28, item 1)."""

from __future__ import annotations

import math

import pytest

from xinfer_ros.config_paths import config_dir
from xinfer_ros.core import Request, Stage
from xinfer_ros.core.constants import DELTA
from xinfer_ros.core.errors import RateTableError, SchedulerStateError
from xinfer_ros.core.rate_table import load_rate_table
from xinfer_ros.core.saturation import SaturationSettings
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


# -- the lane gate: units launch only into free lanes ------------------------------------------
def make_gated() -> XInferPolicy:
    from xinfer_ros.core.registry import forms_batches, make_policy

    p = make_policy("xinfer_batch_gated", rate_table=BATCH4, slots=(4, 4, 8))
    assert isinstance(p, XInferPolicy) and forms_batches("xinfer-batch-gated") and p.lane_gate
    return p


def running(p: XInferPolicy, stage: Stage) -> list[int]:
    """Ids of the launched units of ``stage`` (on a lane or waiting for one)."""
    return [rid for rid, u in p.tracker.units.items() if u.stage == stage]


def test_gated_units_launch_into_free_lanes_only_and_wait_in_the_ready_queue():
    p = make_gated()
    assert [p._launch_limit(s) for s in Stage] == [4, 4, 8]  # 1, 1, 2 lanes, all free
    first = launched(p, [2.0])
    # Launched but not started: its lane is still free and more units may join it.
    second = launched(p, [2.0])
    assert len(first) == len(second) == 1
    p.start_batch(Stage.VIT, first + second, 0.0)
    # The one ViT lane runs a batch: arrivals wait in the ready queue, not on the lane.
    assert launched(p, [2.0, 2.0, 2.0], t=0.001) == []
    assert p._launch_limit(Stage.VIT) == 2 and len(p.ready_queue(Stage.VIT)) == 3
    ungated = policy()
    ids = launched(ungated, [2.0, 2.0])
    ungated.start_batch(Stage.VIT, ids, 0.0)
    assert len(launched(ungated, [2.0, 2.0, 2.0], t=0.001)) == 2  # up to the 4 slots


def test_a_finished_batch_frees_its_lane_for_the_ready_units_at_the_next_decision():
    p = make_gated()
    ids = launched(p, [2.0, 2.0])
    p.start_batch(Stage.VIT, ids, 0.0)
    launched(p, [2.0] * 5, t=0.001)
    assert len(p.ready_queue(Stage.VIT)) == 5
    p.on_complete(ids[0], Stage.VIT, 0.002)
    assert running(p, Stage.VIT) == [ids[1]]  # a member still runs: the lane is busy
    p.on_complete(ids[1], Stage.VIT, 0.003)
    # The lane is free: max_batch ready units launch for it.
    assert len(running(p, Stage.VIT)) == 4 and len(p.ready_queue(Stage.VIT)) == 1


def test_a_lightly_loaded_gated_server_gives_each_unit_a_free_lane():
    """Two Action lanes: the second unit launches while the first one's batch runs."""
    p = make_gated()
    ids = launched(p, [2.0, 2.0])
    p.start_batch(Stage.VIT, ids, 0.0)
    for rid in ids:
        p.on_complete(rid, Stage.VIT, 0.01)
    assert sorted(running(p, Stage.PREFILL)) == sorted(ids)
    p.start_batch(Stage.PREFILL, ids, 0.01)
    p.on_complete(ids[0], Stage.PREFILL, 0.02)
    assert running(p, Stage.ACTION) == [ids[0]]
    p.start_batch(Stage.ACTION, [ids[0]], 0.02)
    assert p._launch_limit(Stage.ACTION) == 1 + 4  # one lane busy, the other free
    p.on_complete(ids[1], Stage.PREFILL, 0.021)
    assert sorted(running(p, Stage.ACTION)) == sorted(ids)


@pytest.mark.parametrize("preset", ["xinfer_batch_gated", "xinfer_batch_riders"])
def test_riders_join_a_waiting_batch_past_vit_without_admission(preset):
    """ride_along: an ordinary unit admission refuses launches beside a waiting one.

    Strict priority refuses every ordinary unit while a request is protected; with
    riders, relaxed r0's Prefill launches anyway once tight r1's waits for its batch
    (the former then decides whether it joins). ViT units still pass admission.
    """
    from xinfer_ros.core.registry import make_policy

    p = make_policy(preset, rate_table=BATCH4, slots=(4, 4, 8), strict_priority=True)
    assert isinstance(p, XInferPolicy)
    relaxed, tight = launched(p, [2.0]), launched(p, [BATCH4.isolated_request_s + 0.006])
    assert len(relaxed + tight) == 2 and p.protected == frozenset(tight)
    p.start_batch(Stage.VIT, relaxed + tight, 0.0)
    for rid in relaxed + tight:
        p.on_complete(rid, Stage.VIT, 0.002)
    expected = sorted(relaxed + tight) if p.ride_along else tight
    assert sorted(running(p, Stage.PREFILL)) == expected
    # At ViT admission still decides: beside a tight arrival's waiting ViT unit, a
    # relaxed one waits while a request is protected.
    assert len(launched(p, [BATCH4.isolated_request_s + 0.006], t=0.003)) == 1
    assert launched(p, [2.0], t=0.003) == []


# -- batching under pressure ------------------------------------------------------------------
def make_pressed(**kwargs: object) -> XInferPolicy:
    from xinfer_ros.core.registry import forms_batches, make_policy

    p = make_policy("xinfer_batch_pressure", rate_table=BATCH4, slots=(4, 4, 8), **kwargs)
    assert isinstance(p, XInferPolicy) and forms_batches("xinfer-batch-pressure")
    assert p.lane_gate and p.ride_along and p.batch_under_pressure
    return p


def test_on_time_counts_the_units_each_service_finishes_by_their_deadlines():
    from xinfer_ros.core.xinfer_policy import _on_time

    durations = (1.0, 1.2, 1.3, 1.4)
    # One lane: alone the second unit ends at 2.0; together both end at 1.2.
    assert _on_time([1.0, 1.5], [0.0], durations, 0.0, 1) == 1
    assert _on_time([1.0, 1.5], [0.0], durations, 0.0, 4) == 1  # the first is late at 1.2
    assert _on_time([1.3, 1.5], [0.0], durations, 0.0, 1) == 1
    assert _on_time([1.3, 1.5], [0.0], durations, 0.0, 4) == 2
    # The rest of the request counts after the stage; a lane busy until 0.5 starts late.
    assert _on_time([1.3, 1.5], [0.0], durations, 0.2, 4) == 1
    assert _on_time([1.0, 1.5], [0.0, 0.5], durations, 0.0, 1) == 2
    assert _on_time([], [0.0], durations, 0.0, 4) == 0


def test_an_unpressed_stage_launches_one_unit_per_free_lane_and_holds_none():
    """Relaxed arrivals: serving them alone keeps every deadline, so none batch."""
    p = make_pressed()
    ids = launched(p, [2.0, 2.0, 2.0])
    assert len(ids) == 1 and len(p.ready_queue(Stage.VIT)) == 2  # one ViT lane
    assert not p._under_pressure(Stage.VIT, 0.0)
    assert p.plan_batch(Stage.VIT, ids, 0.0).runs_now(0.0)  # no hold for mates
    gated = make_gated()
    assert len(launched(gated, [2.0, 2.0, 2.0])) == 3  # the gate alone fills the lane
    assert not gated.plan_batch(Stage.VIT, running(gated, Stage.VIT), 0.0).runs_now(0.0)


def test_a_pressed_stage_launches_a_batch_that_keeps_deadlines_serving_alone_would_miss():
    p = make_pressed()
    cost = p.batch_cost
    assert cost is not None
    d = cost.durations(0, (0, 0, 0))
    rest = p.predictor.suffix((0, 0, 0))[1]
    assert 4 * d[0] > d[3]  # on this table a batch of four beats four units alone
    # Each deadline fits a batch of four started now, not the fourth unit served alone.
    budget = d[3] + rest + p.delta + 0.2 * (4 * d[0] - d[3])
    ids = launched(p, [budget] * 4)
    assert p._under_pressure(Stage.VIT, 0.0)
    assert len(ids) == 4
    plan = p.plan_batch(Stage.VIT, ids, 0.0)
    assert len(plan.members) == 4
    for rid in plan.members:
        assert plan.duration + rest <= p.requests[rid].deadline


def test_ties_batch_a_backlog_that_misses_its_deadlines_either_way():
    """``batch_on_ties``: a backlog lost alone and batched alike is batched; one kept alone is not.

    Four arrivals whose budgets no service can meet (shorter than one ViT unit and the
    stages after it): the pressure test finds no gain and serves them one unit per
    lane; with ties it launches them all, to be cleared in batches. Relaxed arrivals
    are kept serving alone, so neither setting batches them.
    """
    from xinfer_ros.core.registry import forms_batches, make_policy

    lost = [0.001] * 4
    pressure = make_pressed()
    assert len(launched(pressure, lost)) == 1
    assert not pressure._under_pressure(Stage.VIT, 0.0)
    ties = make_policy("xinfer_batch_ties", rate_table=BATCH4, slots=(4, 4, 8))
    assert isinstance(ties, XInferPolicy) and forms_batches("xinfer-batch-ties")
    assert ties.batch_on_ties and ties.batch_under_pressure
    assert len(launched(ties, lost)) == 4
    assert ties._under_pressure(Stage.VIT, 0.0)
    relaxed = make_policy("xinfer_batch_ties", rate_table=BATCH4, slots=(4, 4, 8))
    assert isinstance(relaxed, XInferPolicy)
    assert len(launched(relaxed, [2.0] * 3)) == 1
    assert not relaxed._under_pressure(Stage.VIT, 0.0)


def test_strict_fill_slots_leaves_a_backlog_lost_either_way_unbatched():
    """``xinfer_batch_fill_slots_strict`` is fill_slots without ties: the lost backlog
    above is not pressure, so it launches one unit per free lane where fill_slots
    launches all four to clear them in batches."""
    from xinfer_ros.core.registry import forms_batches, make_policy

    lost = [0.001] * 4
    launches = {}
    for preset in ("xinfer_batch_fill_slots", "xinfer_batch_fill_slots_strict"):
        p = make_policy(preset, rate_table=BATCH4, slots=(4, 4, 8))
        assert isinstance(p, XInferPolicy) and forms_batches(preset)
        assert p.fill_under_pressure and p.slots_under_pressure
        assert p.batch_on_ties is (preset == "xinfer_batch_fill_slots")
        launches[preset] = len(launched(p, lost))
    assert launches == {"xinfer_batch_fill_slots": 4, "xinfer_batch_fill_slots_strict": 1}


def test_floors_without_filling_are_refused():
    with pytest.raises(ValueError, match="fill_keeps_floors needs fill_under_pressure"):
        policy(lane_gate=True, batch_under_pressure=True, fill_keeps_floors=True)


def test_the_pressure_verdict_with_and_without_ties():
    from xinfer_ros.core.xinfer_policy import _pressed

    # (batched, alone, units): batches keep more; as many with a miss; as many, none
    # missed; fewer, with a miss alone.
    cases = [((3, 2, 4), True, True), ((2, 2, 4), False, True), ((0, 0, 4), False, True),
             ((4, 4, 4), False, False), ((1, 2, 4), False, False)]
    for (batched, alone, units), plain, ties in cases:
        assert _pressed(batched, alone, units, ties=False) is plain, (batched, alone)
        assert _pressed(batched, alone, units, ties=True) is ties, (batched, alone)


def test_ties_without_the_pressure_test_are_refused():
    with pytest.raises(ValueError, match="batch_on_ties needs batch_under_pressure"):
        policy(lane_gate=True, batch_on_ties=True)
    with pytest.raises(ValueError, match="fill_under_pressure needs batch_under_pressure"):
        policy(lane_gate=True, fill_under_pressure=True)
    with pytest.raises(ValueError, match="slots_under_pressure needs fill_under_pressure"):
        policy(lane_gate=True, batch_under_pressure=True, slots_under_pressure=True)


def test_slots_under_pressure_launch_a_lost_backlog_up_to_the_slots():
    """Eight lost arrivals on one ViT lane (slots 4, batches of 4), the lane busy.

    The gate launches no ViT unit while its one lane runs a batch; under pressure,
    ``slots_under_pressure`` launches up to the stage's four slots as lane batching
    does. Relaxed arrivals (no pressure) launch one per free lane either way.
    """
    from xinfer_ros.core.registry import make_policy

    counts = {}
    for preset in ("xinfer_batch_fill", "xinfer_batch_fill_slots"):
        p = make_policy(preset, rate_table=BATCH4, slots=(4, 4, 8))
        assert isinstance(p, XInferPolicy)
        first = launched(p, [0.001])
        p.start_batch(Stage.VIT, first, 0.0)  # the one ViT lane is busy
        launched(p, [0.001] * 7, 1e-4)
        assert p._under_pressure(Stage.VIT, 1e-4)
        counts[preset] = len(running(p, Stage.VIT))
        relaxed = make_policy(preset, rate_table=BATCH4, slots=(4, 4, 8))
        assert len(launched(relaxed, [2.0] * 3)) == 1
    assert counts == {"xinfer_batch_fill": 1, "xinfer_batch_fill_slots": 4}


def test_fill_forms_full_batches_under_pressure_where_ties_cut_them():
    """Four lost arrivals (the ties test's backlog) plan one ViT batch.

    A protected relaxed request outside them, predicted on time, sets the guard: ties
    keeps the batch's extra time within it; fill, under pressure, batches all four.
    """
    from xinfer_ros.core.registry import forms_batches, make_policy

    sizes = {}
    for preset in ("xinfer_batch_ties", "xinfer_batch_fill"):
        p = make_policy(preset, rate_table=BATCH4, slots=(4, 4, 8))
        assert isinstance(p, XInferPolicy) and forms_batches(preset)
        ids = launched(p, [0.001] * 4)
        assert p._under_pressure(Stage.VIT, 0.0)
        p._batch_guard = lambda members, t: 1e-6  # a protected request with no spare
        sizes[preset] = len(p.plan_batch(Stage.VIT, ids, 0.0).members)
    assert sizes == {"xinfer_batch_ties": 1, "xinfer_batch_fill": 4}


def test_fill_skips_the_guard_it_drops_and_keeps_it_when_unpressed():
    """Under pressure a filling batch has no guard, so plan_batch does not compute one;
    unpressed (relaxed arrivals), fill plans with the guard as ties does."""
    from xinfer_ros.core.registry import make_policy

    calls = []

    def counted(p: XInferPolicy) -> None:
        real = p._batch_guard

        def guard(members: set[int], t: float) -> float:
            calls.append(len(members))
            return real(members, t)
        p._batch_guard = guard  # type: ignore[method-assign]

    pressed = make_policy("xinfer_batch_fill", rate_table=BATCH4, slots=(4, 4, 8))
    assert isinstance(pressed, XInferPolicy)
    ids = launched(pressed, [0.001] * 4)
    assert pressed._under_pressure(Stage.VIT, 0.0)
    counted(pressed)
    assert len(pressed.plan_batch(Stage.VIT, ids, 0.0).members) == 4
    assert calls == []
    relaxed = make_policy("xinfer_batch_fill", rate_table=BATCH4, slots=(4, 4, 8))
    assert isinstance(relaxed, XInferPolicy)
    ids = launched(relaxed, [2.0])
    assert not relaxed._under_pressure(Stage.VIT, 0.0)
    counted(relaxed)
    relaxed.plan_batch(Stage.VIT, ids, 0.0)
    assert calls == [1]


def _through(p: XInferPolicy, rid: int, until: Stage, t: float, step: float = 1e-4) -> float:
    """Run ``rid``'s launched units alone up to ``until``, which it is launched into
    (and started on a lane); returns the time reached."""
    for stage in Stage:
        assert running(p, stage).count(rid) == 1, (rid, stage)
        p.start_batch(stage, [rid], t)
        if stage == until:
            return t
        t += step
        p.on_complete(rid, stage, t)
    raise AssertionError(f"{until} not reached")


# Not fill_slots: with both Action lanes busy its backlog is under pressure, and it
# launches relaxed into the slots then, as it is meant to.
@pytest.mark.parametrize("preset", ["xinfer_batch_pressure", "xinfer_batch_ties",
                                    "xinfer_batch_riders"])
def test_unpressed_riders_wait_for_admission(preset):
    """Riders launch without admission's checks only while their stage is under pressure.

    Two Action lanes (8 slots, batches of 4) run fillers; relaxed, then tight
    (protected) wait for Action in the ready queue. When both lanes are free, tight
    launches and waits for its batch; strict priority refuses ordinary work while a
    request is protected. Unpressed (two units, two free lanes), relaxed is no rider
    and stays in the ready queue; plain riders launch it beside tight.
    """
    from xinfer_ros.core.registry import make_policy

    p = make_policy(preset, rate_table=BATCH4, slots=(4, 4, 8), strict_priority=True)
    assert isinstance(p, XInferPolicy)
    fillers = launched(p, [2.0])
    t = _through(p, fillers[0], Stage.ACTION, 0.0)
    fillers += launched(p, [2.0], t)
    t = _through(p, fillers[1], Stage.ACTION, t)
    relaxed = launched(p, [2.0], t)
    t = _through(p, relaxed[0], Stage.PREFILL, t) + 1e-4
    p.on_complete(relaxed[0], Stage.PREFILL, t)
    assert [r.request_id for r in p.ready_queue(Stage.ACTION)] == relaxed  # lanes busy
    busy = p.tracker.counts
    budget = p.predictor.suffix(busy)[0] + p.delta + 0.005
    tight = launched(p, [budget], t)
    assert p.protected == frozenset(tight)
    t = _through(p, tight[0], Stage.PREFILL, t) + 1e-4
    p.on_complete(tight[0], Stage.PREFILL, t)
    for rid in fillers:
        t += 1e-4
        p.on_complete(rid, Stage.ACTION, t)
    assert p.protected == frozenset(tight)
    assert tight[0] in running(p, Stage.ACTION)
    if p.batch_under_pressure:
        assert not p._under_pressure(Stage.ACTION, t)
        assert running(p, Stage.ACTION) == tight
        assert [r.request_id for r in p.ready_queue(Stage.ACTION)] == relaxed
    else:
        assert sorted(running(p, Stage.ACTION)) == sorted(tight + relaxed)


@pytest.mark.parametrize("preset", ["xinfer_batch_pressure", "xinfer_batch_ties",
                                    "xinfer_batch_fill_slots", "xinfer_batch_gated"])
def test_unpressed_admission_sees_the_launch_limit_as_the_stage_slots(preset):
    """A relaxed Action unit that would hold the last free lane a protected one needs.

    A filler runs on one of the two Action lanes; relaxed is ready for Action while
    protected tight runs ViT. On the 8 Action slots the gate sees, the slot check finds
    a slot free for tight whenever it arrives, and relaxed launches; unpressed, the
    launch limit (one unit per free lane: 2) is the slots, so relaxed would hold the
    second lane and tight would wait beyond its spare for one: relaxed waits.
    """
    from xinfer_ros.core.registry import make_policy

    p = make_policy(preset, rate_table=BATCH4, slots=(4, 4, 8))
    assert isinstance(p, XInferPolicy)
    filler = launched(p, [2.0])
    t = _through(p, filler[0], Stage.ACTION, 0.0)
    relaxed = launched(p, [2.0], t)
    t = _through(p, relaxed[0], Stage.PREFILL, t)
    budget = p.predictor.suffix(p.tracker.counts)[0] + p.delta + 0.02
    tight = launched(p, [budget], t)
    p.start_batch(Stage.VIT, tight, t)
    t += 1e-4
    p.on_complete(relaxed[0], Stage.PREFILL, t)
    assert p.protected == frozenset(tight)
    pressure_preset = p.batch_under_pressure  # and its stage is not under pressure here
    assert (relaxed[0] in running(p, Stage.ACTION)) is not pressure_preset
    assert p._admit_slots[Stage.ACTION] == (2 if pressure_preset else 8)


@pytest.mark.parametrize("flag", ["ride_along", "batch_under_pressure"])
def test_a_lane_gate_setting_without_the_gate_is_refused(flag):
    with pytest.raises(ValueError, match=f"{flag} needs lane_gate"):
        policy(**{flag: True})


def test_batch_feedback_needs_batches_and_learns_only_when_on():
    with pytest.raises(ValueError, match="batch_feedback needs max_batch above one"):
        policy(max_batch=1, batch_feedback=True)
    plain, fed = policy(), policy(batch_feedback=True)
    for p in (plain, fed):
        assert p.batch_cost is not None
        for _ in range(40):  # batches ran 0.7x what the table says
            planned = p.batch_cost.duration(Stage.ACTION, 2, (0, 0, 0))
            p.observe_batch(Stage.ACTION, planned, 0.7 * planned / p.batch_cost.scale[2])
    assert plain.batch_cost is not None and plain.batch_cost.scale == (1.0, 1.0, 1.0)
    assert fed.batch_cost is not None and fed.batch_cost.scale[2] == pytest.approx(0.7, rel=0.05)


def test_the_fed_preset_is_fill_slots_with_floors_and_feedback():
    from xinfer_ros.core.registry import forms_batches, make_policy

    p = make_policy("xinfer_batch_fill_slots_floors_fed", rate_table=BATCH4, slots=(4, 4, 8))
    assert isinstance(p, XInferPolicy) and forms_batches("xinfer_batch_fill_slots_floors_fed")
    assert p.batch_feedback and p.fill_keeps_floors and p.slots_under_pressure


def test_contest_and_feedback_by_size_need_their_prerequisites():
    with pytest.raises(ValueError, match="contest_late needs max_batch above one"):
        policy(max_batch=1, contest_late=True)
    with pytest.raises(ValueError, match="batch_feedback_by_size needs batch_feedback"):
        policy(batch_feedback_by_size=True)


def test_the_contest_margin_is_the_predictors_error_on_the_remaining_time():
    from xinfer_ros.core.rate_correction import RateCorrection

    p = policy(contest_late=True)
    assert p._contest(Stage.PREFILL, 0.02, 0.08) == 0.0  # no correction: exact rates
    corr = RateCorrection()
    for i in range(40):  # Prefill off by ~10 %, Action by ~30 %, ViT exact
        corr.observe(Stage.PREFILL, 1.1 if i % 2 else 1 / 1.1)
        corr.observe(Stage.ACTION, 1.3 if i % 2 else 1 / 1.3)
        corr.observe(Stage.VIT, 1.0)
    p.predictor.set_correction(corr)
    disp = corr.dispersion
    assert disp[0] == 0.0 and disp[1] > 0.05 and disp[2] > disp[1]
    assert p._contest(Stage.PREFILL, 0.02, 0.08) == pytest.approx(0.02 * disp[1] + 0.08 * disp[2])
    assert p._contest(Stage.ACTION, 0.06, 0.001) == pytest.approx(0.06 * disp[2])
    off = policy()
    off.predictor.set_correction(corr)
    assert off._contest(Stage.ACTION, 0.06, 0.001) == 0.0


def test_the_contest_preset_is_fed_with_feedback_by_size_and_contested_units():
    from xinfer_ros.core.registry import forms_batches, make_policy

    p = make_policy("xinfer_batch_contest", rate_table=BATCH4, slots=(4, 4, 8))
    assert isinstance(p, XInferPolicy) and forms_batches("xinfer_batch_contest")
    assert p.batch_feedback and p.fill_keeps_floors and p.slots_under_pressure
    assert p.contest_late and p.batch_cost is not None and p.batch_cost.by_size


def test_a_backlog_late_by_less_than_the_predictors_error_is_not_pressure():
    """Four arrivals each a few ms short of their budget alone: with ties that loss puts
    ViT under pressure; contested (the correction has seen units off by ~60 %), it does not."""
    from xinfer_ros.core.rate_correction import RateCorrection

    budget = BATCH4.isolated_request_s + DELTA - 0.003
    given_up = make_policy_named("xinfer_batch_contest")
    launched(given_up, [budget] * 4)
    assert given_up._under_pressure(Stage.VIT, 0.0)
    contested = make_policy_named("xinfer_batch_contest")
    corr = RateCorrection()
    for i in range(40):
        for s in Stage:
            corr.observe(s, 1.6 if i % 2 else 1 / 1.6)
    contested.predictor.set_correction(corr)
    assert min(corr.dispersion) > 0.4
    launched(contested, [budget] * 4)
    assert not contested._under_pressure(Stage.VIT, 0.0)


def make_policy_named(name: str) -> XInferPolicy:
    from xinfer_ros.core.registry import make_policy

    p = make_policy(name, rate_table=BATCH4, slots=(4, 4, 8))
    assert isinstance(p, XInferPolicy)
    return p


def test_error_margin_needs_batches_and_passes_the_predictors_error_to_formation(monkeypatch):
    import xinfer_ros.core.xinfer_policy as xp
    from xinfer_ros.core.rate_correction import RateCorrection

    with pytest.raises(ValueError, match="error_margin needs max_batch above one"):
        policy(max_batch=1, error_margin=True)
    seen: list[dict[str, object]] = []
    real = xp.form_batch_of

    def spy(*args: object, **kwargs: object) -> object:
        seen.append(kwargs)
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(xp, "form_batch_of", spy)
    corr = RateCorrection()
    for i in range(40):
        for s in Stage:
            corr.observe(s, 1.3 if i % 2 else 1 / 1.3)
    got = []
    for flags in ({}, {"contest_late": True}, {"error_margin": True}):
        p = policy(**flags)
        p.predictor.set_correction(corr)
        p.plan_batch(Stage.VIT, launched(p, [2.0] * 3), 0.0)
        got.append((seen[-1]["contest"], seen[-1]["margin"]))
    (plain_c, plain_m), (con_c, con_m), (mar_c, mar_m) = got
    assert plain_c == plain_m == con_m == mar_c == 0.0
    # The same error on the same state: the one the contest uses, now kept as slack.
    assert con_c > 0.0 and mar_m == pytest.approx(con_c)


def test_the_margin_and_deferred_presets_are_contest_and_one_setting_each():
    from xinfer_ros.core.registry import ABLATIONS, forms_batches

    con = dict(ABLATIONS["xinfer_batch_contest"])
    for name, extra in (("xinfer_batch_margin", "error_margin"),
                        ("xinfer_batch_contest_deferred", "defer_batched_units")):
        assert forms_batches(name)
        assert dict(ABLATIONS[name]) == {**con, extra: True}
        p = make_policy_named(name)
        assert p.contest_late and getattr(p, extra)



def make_switch() -> XInferPolicy:
    from xinfer_ros.core.xinfer_policy import batch_former

    p = make_policy_named("xinfer_batch_switch")
    assert p.saturation_switch and p.saturation is not None and p.batch_cost is not None
    assert batch_former(p) is None  # it forms no batch: the lanes do
    return p


def _saturate(p: XInferPolicy, rate: float, until: float) -> None:
    """Feed the meter arrivals at ``rate`` per second until ``until`` (no requests).

    The meter also reads them one dwell before ``until``, so that a reading at
    ``until`` that is still across the band changes the verdict.
    """
    meter = p._meter
    assert meter is not None
    read_at = until - meter.settings.dwell
    i = 0
    while (t := i / rate) < until:
        if t >= read_at:
            meter.saturated(read_at)
            read_at = math.inf
        meter.arrive(t)
        i += 1


def test_the_switch_preset_launches_one_unit_per_lane_below_saturation():
    p = make_switch()
    ids = launched(p, [2.0, 2.0, 2.0])
    # One ViT lane: one unit launches, as unbatched XInfer on slots 1,1,2 would, and
    # admission sees that lane as the stage's slots.
    assert len(ids) == 1 and len(p.ready_queue(Stage.VIT)) == 2
    assert p._admit_slots[Stage.VIT] == 1
    assert p.saturation is not None and p.saturation["switches"] == 0


def test_the_switch_preset_launches_up_to_the_slots_once_saturated():
    p = make_switch()
    # Action: 2 lanes; the fallback unit time is the table's with the other lane busy.
    unit = p._unit_alone(Stage.ACTION)
    _saturate(p, rate=2 * 2.0 / unit, until=2.0)  # utilisation 2
    ids = launched(p, [2.0] * 5, t=2.0)
    # Saturated: units launch up to the ViT slots (4), as lane batching's do; the
    # lane batches them.
    assert len(ids) == 4 and p._admit_slots[Stage.VIT] == 4
    summary = p.saturation
    assert summary is not None and summary["switches"] == 1
    # 2 from the meter's arrivals, plus the five requests that arrived at 2.0.
    assert 2.0 < summary["utilisation"][2] < 2.0 * (1 + 6 / (2 * 2.0 / unit * 2.0))


def test_units_launched_while_saturated_hold_their_lanes_until_below_one_per_lane():
    p = make_switch()
    unit = p._unit_alone(Stage.ACTION)
    _saturate(p, rate=2 * 2.0 / unit, until=2.0)
    ids = launched(p, [10.0] * 4, t=2.0)
    assert len(ids) == 4
    # Two windows later no request has arrived (read a dwell earlier too): unsaturated,
    # nothing more launches while the four launched units outnumber the one ViT lane.
    assert p._meter is not None and p._meter.saturated(6.0 - p._meter.settings.dwell)
    assert launched(p, [10.0], t=6.0) == []
    assert p.saturation is not None and p.saturation["switches"] == 2
    for rid in ids:
        p.on_complete(rid, Stage.VIT, 6.01)
    assert len(running(p, Stage.VIT)) == 1


def test_the_switch_spreads_and_holds_ticks_only_while_unsaturated():
    p = make_switch()
    assert p.spreads_lanes() and not p.at_own_limit(Stage.VIT)
    launched(p, [2.0, 2.0])
    # The one ViT lane is taken: a tick could launch nothing more.
    assert p.at_own_limit(Stage.VIT) and not p.at_own_limit(Stage.ACTION)
    unit = p._unit_alone(Stage.ACTION)
    _saturate(p, rate=2 * 2.0 / unit, until=2.0)
    launched(p, [2.0], t=2.0)
    assert not p.spreads_lanes() and not p.at_own_limit(Stage.VIT)
    plain = policy()  # other policies: the slots are their limit, the lanes batch
    assert not plain.spreads_lanes() and not plain.at_own_limit(Stage.VIT)


def test_the_switch_meter_reads_each_forward_over_its_cost_factor():
    p = make_switch()
    d = p.batch_cost.durations(0, (0, 0, 0))  # type: ignore[union-attr]
    for _ in range(2):  # both members of one batch of two report it
        p.observe_forward(Stage.VIT, 0.010, 2, 1.0)
    p.observe_forward(Stage.VIT, 0.004, 1, 1.0)
    assert p._meter is not None
    alone = 0.010 / (d[1] / d[0])
    assert p._meter.unit_times(1.0)[0] == pytest.approx((2 * alone + 0.004) / 3)
    # Other policies ignore forwards.
    plain = policy()
    plain.observe_forward(Stage.VIT, 0.010, 2, 1.0)
    assert plain.saturation is None


@pytest.mark.parametrize(("kwargs", "needs"), [
    ({"saturation_switch": True}, "max_batch above one"),
    ({"max_batch": 4, "saturation_switch": True, "lane_gate": True}, "excludes"),
    ({"max_batch": 4, "saturation_switch": True, "error_margin": True}, "excludes"),
    ({"max_batch": 4, "saturation_switch": True, "batch_feedback": True}, "excludes"),
    ({"max_batch": 4, "saturation": SaturationSettings()}, "need saturation_switch"),
])
def test_the_switch_refuses_settings_it_cannot_honour(kwargs, needs):
    with pytest.raises(ValueError, match=needs):
        XInferPolicy(rate_table=BATCH4, slots=(4, 4, 8), **kwargs)  # type: ignore[arg-type]


def test_the_switch_follows_new_slots():
    p = make_switch()
    assert p._meter is not None and p._meter.lanes == (1, 1, 2)
    p.set_slots((8, 8, 16))
    assert p._meter.lanes == (2, 2, 4)
    assert len(launched(p, [2.0] * 3)) == 2  # two ViT lanes, unsaturated


def _first_limit(name: str, budget: float, *, pin: bool, t: float = 1.0) -> int:
    """One request's ViT launch on a fresh policy pinned saturated or not: its limit."""
    p = make_policy_named(name)
    p.pin_saturation(pin)
    out = p.on_arrival(Request(0, "r0", arrival=t, budget=budget), t)
    (launch,) = out.launches
    return launch.batch_limit


def test_saturated_tight_requests_get_the_largest_batch_that_keeps_them_on_time():
    name = "xinfer_batch_switch_tight"
    p = make_policy_named(name)
    rest, extra = p._rest_alone_and_batched(p._meter.unit_times(1.0))  # type: ignore[union-attr]
    probe = Request(0, "r0", arrival=1.0, budget=1.0)
    lead = probe.deadline - 1.0 - 1.0  # deadline − arrival − budget
    for k in (1, 2, 3):  # the middle of each batch size's band of budgets
        spare = (extra[k - 1][Stage.VIT] + extra[k][Stage.VIT]) / 2
        assert _first_limit(name, rest[Stage.VIT] + spare - lead, pin=True) == k
    assert _first_limit(name, 0.40, pin=True) == 0  # relaxed: a full batch is on time
    assert _first_limit(name, rest[Stage.VIT] - lead - 0.005, pin=True) == 0  # late alone
    tight = rest[Stage.VIT] + extra[0][Stage.VIT] / 2 - lead + 0.001
    assert _first_limit(name, tight, pin=True) == 1
    assert _first_limit(name, tight, pin=False) == 0  # unsaturated: the lanes spread
    assert _first_limit("xinfer_batch_switch", tight, pin=True) == 0  # the plain switch


def test_the_rest_alone_and_the_batch_extra_are_suffix_sums_of_the_unit_times():
    p = make_policy_named("xinfer_batch_switch_tight")
    cost = p.batch_cost
    assert cost is not None
    unit = (0.004, 0.007, 0.050)
    f = [cost.durations(s, (0, 0, 0))[3] / cost.durations(s, (0, 0, 0))[0] for s in range(3)]
    per = [unit[s] * (f[s] - 1.0) for s in range(3)]
    rest, extra = p._rest_alone_and_batched(unit)
    out = p.predictor.h_out
    assert rest == pytest.approx((out + sum(unit), out + unit[1] + unit[2], out + unit[2]))
    assert len(extra) == 4 and extra[0] == (0.0, 0.0, 0.0)
    assert extra[3] == pytest.approx((sum(per), per[1] + per[2], per[2]))
    assert min(per) > 0.0


def test_tight_alone_needs_the_switch():
    with pytest.raises(ValueError, match="tight_alone needs saturation_switch"):
        XInferPolicy(rate_table=BATCH4, slots=(4, 4, 8), max_batch=4,
                     tight_alone=True)  # type: ignore[arg-type]
