"""FIFO, EDF and Slack-Gate do what they claim; every policy respects the slots."""

from __future__ import annotations

import pytest

from xinfer_ros.core import EDFPolicy, FIFOPolicy, Request, SlackGatePolicy, Stage, make_policy
from xinfer_ros.core.constants import (
    DEFAULT_EDF_LIMITS,
    DEFAULT_SLACK_GATE_LIMITS,
    SLACK_GATE_THRESHOLD,
)
from xinfer_ros.sim.decision_trace import trace_decisions


def req(rid, arrival, budget):
    return Request(rid, f"r{rid}", arrival=arrival, budget=budget)


def ids(out):
    return [(ln.request_id, ln.stage) for ln in out.launches]


def test_fifo_serves_ready_work_in_arrival_order():
    p = FIFOPolicy(slots=(1, 1, 1))
    assert ids(p.on_arrival(req(1, 0.000, 0.400), 0.000)) == [(1, Stage.VIT)]
    assert p.on_arrival(req(2, 0.001, 0.300), 0.001).launches == ()
    assert p.on_arrival(req(3, 0.002, 0.050), 0.002).launches == ()  # earliest deadline
    out = p.on_complete(1, Stage.VIT, 0.010)
    assert ids(out) == [(1, Stage.PREFILL), (2, Stage.VIT)]  # 2 before 3: arrival order
    out = p.on_complete(2, Stage.VIT, 0.020)
    assert ids(out) == [(3, Stage.VIT)]


def test_edf_orders_by_deadline_within_fixed_limits():
    p = EDFPolicy(slots=(4, 4, 4), limits=(1, 2, 1))
    p.add_request(req(1, 0.0, 0.400), 0.0)
    p.add_request(req(2, 0.0, 0.300), 0.0)
    p.add_request(req(3, 0.0, 0.100), 0.0)
    out = p.schedule(0.0)
    assert ids(out) == [(3, Stage.VIT)]      # limit 1 although 4 slots are free
    out = p.on_complete(3, Stage.VIT, 0.01)
    assert ids(out) == [(3, Stage.PREFILL), (2, Stage.VIT)]
    out = p.on_complete(2, Stage.VIT, 0.02)
    assert ids(out) == [(2, Stage.PREFILL), (1, Stage.VIT)]
    assert p.running_counts == (1, 2, 0)     # Prefill limit 2 reached
    assert p.free_slots(Stage.PREFILL) == 2  # ...below the physical slots


@pytest.mark.parametrize("threshold, gated", [(0.040, True), (0.020, False)])
def test_slack_gate_defers_ordinary_work_below_threshold(threshold, gated):
    p = SlackGatePolicy(slots=(2, 2, 2), threshold=threshold)
    p.add_request(req(1, 0.0, 0.400), 0.0)   # ordinary, earlier arrival
    # ℓ − t = 58 ms, R ≈ 30 ms: slack ≈ 28 ms, and ≈ 22 ms once its own ViT runs (the
    # other stages then run under its interference): between the two thresholds.
    p.add_request(req(2, 0.0, 0.062), 0.0)
    slack = p.requests[2].deadline - p.remaining_time(2, 0.0)
    assert 0.020 < slack < 0.040
    assert p.urgent(0.0) == ({2} if gated else set())
    out = p.schedule(0.0)
    assert ids(out) == ([(2, Stage.VIT)] if gated else [(2, Stage.VIT), (1, Stage.VIT)])


def test_slack_gate_opens_when_the_urgent_request_finishes():
    p = SlackGatePolicy(slots=(2, 2, 2), threshold=0.040)
    p.add_request(req(1, 0.0, 0.400), 0.0)
    p.add_request(req(2, 0.0, 0.060), 0.0)
    p.schedule(0.0)
    for s, t in ((Stage.VIT, 0.007), (Stage.PREFILL, 0.017)):
        assert p.on_complete(2, s, t).launches[0].request_id == 2
    out = p.on_complete(2, Stage.ACTION, 0.031)
    assert [r.request_id for r in out.finished] == [2]
    assert ids(out) == [(1, Stage.VIT)]


@pytest.mark.parametrize("name", ["fifo", "edf", "slack_gate", "xinfer"])
def test_every_policy_respects_slots_on_a_closed_loop(name):
    p = make_policy(name, slots=(1, 2, 2))
    orig = p.schedule
    peak = [0, 0, 0]

    def checked(t):
        out = orig(t)
        for s in range(3):
            assert p.running_counts[s] <= p.slots[s]
            peak[s] = max(peak[s], p.running_counts[s])
        return out

    p.schedule = checked
    res = trace_decisions(p, 14, 3.0)
    assert len(res.latencies) > 100
    assert peak[0] == 1  # the slot limit was actually reached


def test_baseline_defaults_are_the_tuned_constants():
    sg = SlackGatePolicy()
    assert sg.threshold == SLACK_GATE_THRESHOLD
    assert tuple(sg.limits) == DEFAULT_SLACK_GATE_LIMITS
    assert tuple(EDFPolicy().limits) == DEFAULT_EDF_LIMITS
    assert SlackGatePolicy(limits=None).limits is None
