"""Slack-aware batch formation (issue 28, item 1): properties and worked cases."""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from xinfer_ros.config_paths import config_dir
from xinfer_ros.core import Predictor
from xinfer_ros.core.batch_cost import BatchCost
from xinfer_ros.core.batch_formation import Candidate, form_batch, is_tight
from xinfer_ros.core.rate_table import load_rate_table
from xinfer_ros.core.stages import Stage

T = 10.0
#: Batch of 1..4 Action units, seconds: each extra member costs 10 ms.
D = (0.050, 0.060, 0.070, 0.080)


def cand(rid: int, slack_alone: float, rest: float = 0.1) -> Candidate:
    """A candidate with ``slack_alone`` to spare when it runs alone from ``T``."""
    return Candidate(rid, T + D[0] + rest + slack_alone, rest)


def test_relaxed_units_batch_and_the_lead_waits_for_mates_at_most_a_lone_duration():
    plan = form_batch([cand(1, 1.0), cand(2, 1.0)], T, D)
    assert plan.members == (1, 2)
    assert plan.duration == D[1]
    assert not plan.runs_now(T)
    assert plan.start_by == pytest.approx(T + D[0])


def test_full_batch_runs_now():
    plan = form_batch([cand(i, 1.0) for i in range(6)], T, D)
    assert plan.members == (0, 1, 2, 3)
    assert plan.runs_now(T)


def test_mate_that_would_miss_its_deadline_is_left_out():
    # Unit 2 has 5 ms to spare alone: a batch of two (10 ms longer) would make it late.
    plan = form_batch([cand(1, 0.025), cand(2, 0.005), cand(3, 1.0)], T, D)
    assert plan.members == (1, 3)
    assert plan.runs_now(T)


def test_tight_unit_behind_relaxed_ones_leads_and_runs_now():
    plan = form_batch([cand(1, 1.0), cand(2, 1.0), cand(3, 0.015)], T, D)
    assert plan.members[0] == 3 and plan.runs_now(T)


def test_unit_late_even_alone_runs_now_with_mates_that_stay_on_time():
    plan = form_batch([cand(1, 1.0), cand(2, -0.01), cand(3, 0.005), cand(4, 1.0)], T, D)
    assert plan.members == (2, 1, 4)  # unit 3 would be made late
    assert plan.runs_now(T)


def test_tight_lead_takes_waiting_mates_but_is_never_held():
    # 25 ms of slack alone: a full batch (+30 ms) would make it late, so it is tight.
    lead = cand(1, 0.025)
    assert is_tight(lead, T, D)
    plan = form_batch([lead, cand(2, 1.0)], T, D)
    assert plan.members == (1, 2)  # +10 ms keeps over half of its slack
    assert plan.runs_now(T)


def test_tight_member_keeps_half_its_slack():
    plan = form_batch([cand(1, 0.025), cand(2, 1.0), cand(3, 1.0)], T, D)
    assert plan.members == (1, 2)  # a third member (+20 ms) would eat 80 % of the slack


def test_protected_requests_outside_limit_the_extra_lane_time():
    plan = form_batch([cand(i, 1.0) for i in range(4)], T, D, guard=0.015)
    assert plan.members == (0, 1)
    assert plan.runs_now(T)  # a full batch would exceed the guard: no waiting for it


def test_filling_drops_the_guard_and_the_half_slack_floor_but_makes_no_member_late():
    # The guard case above and the half-slack case: filled, both batches grow.
    plan = form_batch([cand(i, 1.0) for i in range(4)], T, D, guard=0.015, fill=True)
    assert plan.members == (0, 1, 2, 3)
    plan = form_batch([cand(1, 0.025), cand(2, 1.0), cand(3, 1.0)], T, D, fill=True)
    assert plan.members == (1, 2, 3) and plan.runs_now(T)  # +20 ms of its 25 ms
    # A mate with 5 ms to spare is still left out; lost units still batch freely.
    plan = form_batch([cand(1, 0.025), cand(2, 0.005), cand(3, -0.2), cand(4, -0.1)], T, D,
                      fill=True)
    assert plan.members == (1, 3, 4)  # unit 1 leads (oldest tight), +20 ms of 25


def test_filling_that_keeps_the_floors_drops_only_the_guard():
    # The guard still goes: relaxed units fill the batch past a 15 ms guard.
    plan = form_batch([cand(i, 1.0) for i in range(4)], T, D, guard=0.015, fill=True,
                      keep_floors=True)
    assert plan.members == (0, 1, 2, 3)
    # A tight lead with 25 ms keeps 12.5 ms: one mate (+10 ms), not two (+20 ms).
    plan = form_batch([cand(1, 0.025), cand(2, 1.0), cand(3, 1.0)], T, D, fill=True,
                      keep_floors=True)
    assert plan.members == (1, 2) and plan.runs_now(T)


def test_may_wait_false_runs_now():
    assert form_batch([cand(1, 1.0)], T, D, may_wait=False).runs_now(T)


def test_empty_input_is_an_error():
    with pytest.raises(ValueError, match="candidate"):
        form_batch([], T, D)
    with pytest.raises(ValueError, match="duration"):
        form_batch([cand(1, 1.0)], T, ())


def test_formation_on_the_calibrated_cpu_table():
    table = load_rate_table(config_dir() / "rate_table_cpu_pi0_tiny_batch4.json")
    cost = BatchCost(Predictor(table), 4)
    d = cost.durations(Stage.ACTION, (0, 0, 0))
    relaxed = [Candidate(i, T + 1.0, 0.0) for i in range(4)]
    plan = form_batch(relaxed, T, d)
    assert plan.members == (0, 1, 2, 3) and plan.duration == d[3]


durations_st = st.lists(st.floats(0.001, 0.2), min_size=1, max_size=6).map(
    lambda xs: tuple(sorted(xs)))
candidates_st = st.lists(
    st.tuples(st.floats(-0.1, 0.5), st.floats(0.0, 0.3)), min_size=1, max_size=10)


@settings(max_examples=300, deadline=None)
@given(durations_st, candidates_st, st.floats(0.0, 0.2) | st.just(float("inf")),
       st.booleans())
def test_no_batch_is_formed_that_the_predictor_says_would_miss_a_members_deadline(
        durations, raw, guard, fill):
    cands = [Candidate(i, T + slack, rest) for i, (slack, rest) in enumerate(raw)]
    plan = form_batch(cands, T, durations, guard=guard, fill=fill)
    k = len(plan.members)
    tight = [c.request_id for c in cands if is_tight(c, T, durations)]
    assert plan.members[0] == (tight[0] if tight else 0) and 1 <= k <= len(durations)
    mates = list(plan.members[1:])
    assert mates == sorted(set(mates)) and plan.members[0] not in mates
    assert plan.duration == durations[k - 1]
    if k >= 2:
        if not fill:  # filling, the guard does not apply; no member made late does
            assert durations[k - 1] - durations[0] <= guard
        for rid in plan.members:
            c = cands[rid]
            if c.deadline - T - durations[0] - c.rest >= 1e-12:  # on time alone
                assert c.deadline - T - plan.duration - c.rest >= -1e-12
    # Waiting never pushes a full batch past a member's deadline, nor past d(1).
    assert T <= plan.start_by <= T + durations[0]
    if not plan.runs_now(T):
        for rid in plan.members:
            assert plan.start_by + durations[-1] + cands[rid].rest <= cands[rid].deadline + 1e-12


@settings(max_examples=300, deadline=None)
@given(durations_st, candidates_st, st.booleans())
def test_a_tight_unit_is_never_held_waiting_for_mates(durations, raw, fill):
    cands = [Candidate(i, T + slack, rest) for i, (slack, rest) in enumerate(raw)]
    plan = form_batch(cands, T, durations, fill=fill)
    tight = [c.request_id for c in cands if is_tight(c, T, durations)]
    if tight:
        assert plan.runs_now(T)
        assert plan.members[0] == tight[0]  # the oldest tight unit runs now


def test_a_unit_late_by_less_than_the_contest_margin_runs_alone_and_joins_no_batch():
    # Unit 2 is predicted 5 ms late alone: given up without a margin, contested with 10 ms.
    cands = [cand(1, 1.0), cand(2, -0.005), cand(3, 1.0)]
    assert form_batch(cands, T, D).members == (2, 1, 3)
    plan = form_batch(cands, T, D, contest=0.010)
    assert plan.members == (2,) and plan.runs_now(T)
    # As a mate it is left out too (its lead here is a tight unit on time, filling).
    lead = cand(4, 0.015)
    assert form_batch([lead, cand(5, -0.005), cand(6, 1.0)], T, D, fill=True,
                      contest=0.010).members == (4, 6)
    # Later than the margin it is lost, and batches as before.
    assert form_batch([cand(1, 1.0), cand(2, -0.02)], T, D, contest=0.010).members == (2, 1)


@settings(max_examples=300, deadline=None)
@given(durations_st, candidates_st, st.floats(0.0, 0.2), st.booleans(), st.booleans())
# Found on a fresh clone: a batch of two costing one rounding step more than one unit,
# an extra that alone − extra rounded away.
@example((0.001, 0.0010000000000000002), [(0.0, 0.25), (0.0, 0.0625)], 0.125, False, False)
def test_a_contested_unit_is_never_made_later_by_a_batch(durations, raw, contest, fill, floors):
    cands = [Candidate(i, T + slack, rest) for i, (slack, rest) in enumerate(raw)]
    plan = form_batch(cands, T, durations, contest=contest, fill=fill,
                      keep_floors=floors and fill)
    for rid in plan.members:
        c = cands[rid]
        alone = c.deadline - T - durations[0] - c.rest
        if -contest <= alone < 0.0:
            assert plan.duration <= durations[0]


def test_members_keep_the_error_margin_as_slack_or_all_of_it_when_they_have_less():
    # Unit 2 has 35 ms to spare alone (not tight: a full batch costs 30 ms more).
    cands = [cand(1, 1.0), cand(2, 0.035), cand(3, 1.0), cand(4, 1.0)]
    assert form_batch(cands, T, D).members == (1, 2, 3, 4)  # leaves unit 2 with 5 ms
    # With a 10 ms margin it keeps 10 ms: the fourth member (+30 ms) stays out.
    assert form_batch(cands, T, D, margin=0.010).members == (1, 2, 3)
    # With a 40 ms margin it has less than the margin and keeps all of it: no batch.
    assert form_batch(cands, T, D, margin=0.040).members == (1, 3, 4)
    assert form_batch([cand(2, 0.035), cand(1, 1.0)], T, D, margin=0.040).members == (2,)
    # A lone relaxed lead holds for mates only while a full batch leaves it the margin.
    held = form_batch([cand(1, 0.045)], T, D, margin=0.010)
    assert held.start_by == pytest.approx(T + 0.045 - (D[-1] - D[0]) - 0.010)


@settings(max_examples=300, deadline=None)
@given(durations_st, candidates_st, st.floats(0.0, 0.2), st.booleans(), st.booleans())
def test_a_batch_never_takes_a_members_error_margin(durations, raw, margin, fill, floors):
    cands = [Candidate(i, T + slack, rest) for i, (slack, rest) in enumerate(raw)]
    plan = form_batch(cands, T, durations, margin=margin, fill=fill,
                      keep_floors=floors and fill)
    if len(plan.members) < 2:
        return
    for rid in plan.members:
        c = cands[rid]
        alone = c.deadline - T - durations[0] - c.rest
        in_batch = c.deadline - T - plan.duration - c.rest
        if alone >= 0.0:  # one that can make it keeps min(alone, margin)
            assert in_batch >= min(alone, margin) - 1e-12
