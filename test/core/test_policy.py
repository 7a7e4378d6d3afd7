"""The driver contract shared by all policies (events, launches, errors)."""

from __future__ import annotations

import math

import pytest

from xinfer_ros.core import (
    InvalidRequestError,
    Request,
    SchedulerStateError,
    Stage,
    StageState,
    make_policy,
)


def req(rid, arrival=0.0, budget=0.4):
    return Request(rid, f"r{rid}", arrival=arrival, budget=budget)


@pytest.mark.parametrize("name", ["fifo", "edf", "slack_gate", "xinfer"])
def test_full_lifecycle(name):
    p = make_policy(name)
    r = req(1)
    out = p.on_arrival(r, 0.0)
    assert [(ln.request_id, ln.stage, ln.robot_id) for ln in out.launches] == [
        (1, Stage.VIT, "r1")]
    assert r.states[0] is StageState.RUNNING and r.issued[0] == 0.0
    out = p.on_complete(1, Stage.VIT, 0.007)
    assert out.launches[0].stage is Stage.PREFILL
    out = p.on_complete(1, Stage.PREFILL, 0.017)
    assert out.launches[0].stage is Stage.ACTION
    out = p.on_complete(1, Stage.ACTION, 0.031)
    assert out.finished == (r,) and r.done and r.finished[2] == 0.031
    assert p.requests == {} and p.running_counts == (0, 0, 0)
    assert p.on_tick(0.04).finished == ()


def test_abort_returns_unit_to_its_queue_and_remove_frees_slot():
    p = make_policy("fifo", slots=(1, 1, 1))
    p.on_arrival(req(1), 0.0)
    p.on_arrival(req(2), 0.0)
    p.abort(1, 0.001)
    assert [r.request_id for r in p.ready_queue(Stage.VIT)] == [2, 1]
    out = p.on_tick(0.001)
    assert [ln.request_id for ln in out.launches] == [1]  # arrival order after abort
    p.remove_request(1, 0.002)
    assert p.running_counts == (0, 0, 0)
    assert [ln.request_id for ln in p.on_tick(0.002).launches] == [2]


def test_contract_violations_raise_clear_errors():
    p = make_policy("xinfer")
    p.on_arrival(req(1), 0.010)
    with pytest.raises(SchedulerStateError, match="request id 1 is already live"):
        p.on_arrival(req(1), 0.010)
    with pytest.raises(SchedulerStateError, match="completion of PREFILL for request 1, "
                                                  "which runs VIT"):
        p.on_complete(1, Stage.PREFILL, 0.011)
    with pytest.raises(SchedulerStateError, match=r"time went backwards: t=0.005"):
        p.on_tick(0.005)
    with pytest.raises(InvalidRequestError, match="t must be finite, got nan"):
        p.on_tick(math.nan)
    with pytest.raises(SchedulerStateError, match="request 9 is not live"):
        p.remove_request(9, 0.02)


@pytest.mark.parametrize("slots, match", [
    ((1, 0, 1), r"slots\[PREFILL\] must be an int >= 1, got 0"),
    ((1, 1), r"one count per stage"),
    ({"V": 1, "A": 2}, r"slots is missing stage\(s\) PREFILL"),
])
def test_bad_slots(slots, match):
    with pytest.raises(InvalidRequestError, match=match):
        make_policy("fifo", slots=slots)
