"""XInfer's admission extensions beyond the paper: slot-aware admission (default on)
and the experimental, default-off forecast-load projection. Off = the paper's
Algorithm 1 as written."""

from __future__ import annotations

import pytest

from xinfer_ros.core import Request, Stage, XInferPolicy, make_policy
from xinfer_ros.core.constants import DELTA
from xinfer_ros.core.registry import ABLATIONS
from xinfer_ros.sim.decision_trace import trace_decisions

from .test_xinfer_policy import (
    BIG,
    CheckedXInfer,
    additive_table,
    check_slots_at_every_decision,
    launched,
)

MS = 1e-3


def _slot_scenario(h_window=0.040, promote_h=False, **kwargs):
    """Slots (1, 1, 1), no interference, no overheads; W (V 10, P 20, A 10 ms).

    At t: Y's Prefill completes, so Y's Action starts (10 ms) and the Prefill slot is
    free; W (wide) waits for Prefill; h (tight) has 2 ms of ViT left, then needs
    Prefill (20) and Action (10): R_h = 32 ms with ℓ_h − t = 40 ms. Once Y's Action
    runs, h's slack 8 ms < B_h = 10 ms, so h is promoted and protected.
    """
    table = additive_table((10, 20, 10), ((0, 0, 0),) * 3)
    p = XInferPolicy(slots=(1, 1, 1), rate_table=table, **kwargs)
    t = 1.0
    y, w, h = 1, 2, 3
    p.on_arrival(Request(y, "y", arrival=t - 0.100, budget=BIG), t - 0.100)
    p.on_complete(y, Stage.VIT, t - 0.090)            # Y Prefill
    p.on_arrival(Request(w, "w", arrival=t - 0.030, budget=BIG), t - 0.030)
    p.on_complete(w, Stage.VIT, t - 0.020)            # W ready for Prefill, slot busy
    p.on_arrival(Request(h, "h", arrival=t - 0.008, budget=h_window + 0.008 + DELTA),
                 t - 0.008)
    if promote_h:
        p._promoted.add(h)  # white-box: promotion persists while live
    assert {r: u.stage for r, u in p.tracker.units.items()} == {y: Stage.PREFILL,
                                                                 h: Stage.VIT}
    out = p.on_complete(y, Stage.PREFILL, t)
    return p, out, t, (y, w, h)


def test_paper_literal_fills_the_last_prefill_slot_and_the_protected_request_waits():
    p, out, t, (y, w, h) = _slot_scenario(slot_aware=False)
    assert h in out.protected
    # CURRENTFEASIBLE only counts interference (none here): W takes the last slot.
    assert launched(out) == [(y, Stage.ACTION), (w, Stage.PREFILL)]
    out = p.on_complete(h, Stage.VIT, t + 0.002)
    assert launched(out) == []  # h waits 18 ms for the Prefill slot ...
    assert p.ready_queue(Stage.PREFILL)[0].request_id == h
    # ... and its predicted finish is then past its deadline: t + 20 + 20 + 10 > ℓ_h.
    assert t + 0.020 + 0.020 + 0.010 > p.requests[h].deadline


def test_slot_aware_defers_the_ordinary_unit_and_the_protected_request_runs():
    p, out, t, (y, w, h) = _slot_scenario()
    assert h in out.protected
    # Admitting W would make h wait 18 ms for Prefill with 8 ms of slack: deferred.
    assert launched(out) == [(y, Stage.ACTION)]
    assert [r.request_id for r in p.ready_queue(Stage.PREFILL)] == [w]
    out = p.on_complete(h, Stage.VIT, t + 0.002)
    assert launched(out) == [(h, Stage.PREFILL)]
    # h now meets its deadline: Prefill ends at t + 22, Action at t + 32 (Y's Action
    # has freed the slot at t + 10).
    assert t + 0.032 <= p.requests[h].deadline


def test_slot_aware_admits_when_the_slot_frees_in_time():
    # Same state, but ℓ_h − t = 52 ms: the 18 ms slot wait fits h's 20 ms of spare
    # time, so W is admitted. (h's slack now exceeds B_h; promotion is forced.)
    _, out, _, (y, w, h) = _slot_scenario(h_window=0.052, promote_h=True)
    assert h in out.protected
    assert launched(out) == [(y, Stage.ACTION), (w, Stage.PREFILL)]


def _forecast_scenario(**kwargs):
    """W (10, 20, 10 ms); each running Action unit adds 15 ms to every stage.

    R1's Action started 9 ms ago (1 ms left). A tight request seen 175 ms ago makes
    the forecaster expect the next 60 ms request at t + 5 ms (P/k = 180 ms). At t the
    ordinary W arrives; its ViT is the candidate.
    """
    table = additive_table((10, 20, 10), ((0, 0, 15),) * 3)
    p = XInferPolicy(slots=(4, 4, 4), rate_table=table, frontend_reserve=0.0, **kwargs)
    t = 1.0
    p.on_arrival(Request(9, "tight", arrival=t - 0.175, budget=0.060), t - 0.175)
    p.remove_request(9, t - 0.175)
    p.on_arrival(Request(1, "r1", arrival=t - 0.100, budget=BIG), t - 0.100)
    p.on_complete(1, Stage.VIT, t - 0.090)
    p.on_complete(1, Stage.PREFILL, t - 0.009)
    assert {r: u.stage for r, u in p.tracker.units.items()} == {1: Stage.ACTION}
    return p, p.on_arrival(Request(2, "w", arrival=t, budget=BIG), t), t


def test_paper_forecast_check_charges_a_finishing_unit_to_the_whole_pipeline():
    # n'_e = (1, 0, 1): R_V = 25 + 35 + 25 = 85 ms > b − δ = 56 ms, so W waits, although
    # R1's Action ends 1 ms from now, long before the forecast arrives.
    p, out, t = _forecast_scenario(arrival_projection=False)
    assert p.forecaster.forecasts(t, t + 0.025)[0].arrival == pytest.approx(t + 0.005)
    assert launched(out) == []


def test_projected_forecast_load_admits_the_unit():
    # At a_e + f = t + 5 ms R1 has left; W is still in ViT: n_e = (1, 0, 0), so
    # R_V = 40 ms <= 56 ms and W starts.
    _, out, _ = _forecast_scenario(arrival_projection=True)
    assert launched(out) == [(2, Stage.VIT)]


def test_defaults_and_presets():
    p = make_policy("xinfer")
    assert p.slot_aware and not p.arrival_projection and not p.forecast_load
    q = make_policy("xinfer_paper")
    assert not q.slot_aware and not q.arrival_projection and not q.forecast_load
    assert ABLATIONS["xinfer_no_slot_aware"] == {"slot_aware": False}
    assert make_policy("xinfer_projection").arrival_projection
    assert make_policy("xinfer_forecast_load").forecast_load


@pytest.mark.parametrize("kwargs", [{}, {"slot_aware": False},
                                    {"arrival_projection": True},
                                    {"forecast_load": True}])
def test_local_property_holds_with_and_without_extensions(kwargs):
    # The extensions only add conditions: every checked admission still keeps every
    # protected request's R_h(n+) within its deadline (CheckedXInfer asserts it).
    p = CheckedXInfer(**kwargs)
    trace_decisions(p, 20, 4.0, budgets=(0.070, 0.400), phase_len=10)
    assert p.checked_admissions > 100


def test_time_dependent_flags():
    assert make_policy("xinfer").time_dependent
    assert make_policy("slack_gate").time_dependent
    assert not make_policy("fifo").time_dependent
    assert not make_policy("edf").time_dependent


def test_phase_budget_schedules_wide_requests_against_it_and_leaves_tight_ones() -> None:
    p = XInferPolicy(phase_budget=0.180)
    wide = Request(1, "w", arrival=1.0, budget=0.400)
    tight = Request(2, "t", arrival=1.0, budget=0.090)
    p.add_request(wide, 1.0)
    p.add_request(tight, 1.0)
    assert (wide.budget, tight.budget) == (0.180, 0.090)
    assert wide.deadline == pytest.approx(1.0 + 0.180 - DELTA)
    assert tight.deadline == pytest.approx(1.0 + 0.090 - DELTA)
    # Forecasts see the capped budget too, so no wide arrival is forecast as wide.
    assert sorted(b for b, _, _ in p.forecaster.groups(1.0)) == [0.090, 0.180]
    untouched = Request(3, "u", arrival=1.0, budget=0.400)
    XInferPolicy().add_request(untouched, 1.0)
    assert untouched.budget == 0.400
    with pytest.raises(ValueError, match="phase_budget"):
        XInferPolicy(phase_budget=0.0)


# -- lazy_slots (issue 27): spare slots serve protected requests only ------------------------
def _action_meeting(budget_b: float, **kwargs):
    """Slots (1, 1, 2), no interference; W (V 10, P 20, A 10 ms).

    A's Action runs (started at t − 2 ms, 8 ms left) when B's Prefill completes at t, so
    B's Action is ready and the second Action slot is free. B's budget sets its slack:
    BIG leaves it ordinary; a window of 12 ms at t leaves 2 ms of slack, below the
    8 ms A's Action could block it, so B is promoted and protected.
    """
    table = additive_table((10, 20, 10), ((0, 0, 0),) * 3)
    p = XInferPolicy(slots=(1, 1, 2), rate_table=table, **kwargs)
    t = 1.0
    a, b = 1, 2
    p.on_arrival(Request(a, "a", arrival=t - 0.040, budget=BIG), t - 0.040)
    p.on_complete(a, Stage.VIT, t - 0.030)
    p.on_arrival(Request(b, "b", arrival=t - 0.030, budget=budget_b), t - 0.030)
    p.on_complete(b, Stage.VIT, t - 0.020)
    p.on_complete(a, Stage.PREFILL, t - 0.002)         # A's Action runs from t − 2 ms
    assert {r: u.stage for r, u in p.tracker.units.items()} == {a: Stage.ACTION,
                                                                 b: Stage.PREFILL}
    out = p.on_complete(b, Stage.PREFILL, t)
    return p, out, t, a, b


def test_lazy_slots_keeps_an_ordinary_unit_off_a_busy_stage_until_it_frees():
    p, out, t, a, b = _action_meeting(BIG, lazy_slots="stage")
    assert launched(out) == []
    assert [r.request_id for r in p.ready_queue(Stage.ACTION)] == [b]
    out = p.on_complete(a, Stage.ACTION, t + 0.008)
    assert launched(out) == [(b, Stage.ACTION)]


def test_without_lazy_slots_the_ordinary_unit_takes_the_spare_slot():
    _, out, _, _, b = _action_meeting(BIG)
    assert launched(out) == [(b, Stage.ACTION)]


def test_lazy_slots_gives_the_spare_slot_to_a_request_that_cannot_wait():
    p, out, t, _, b = _action_meeting(0.030 + 0.012 + DELTA, lazy_slots="stage")
    assert b in out.protected
    assert p.slack(b, t) < 0.008                       # cannot wait for A's 8 ms
    assert launched(out) == [(b, Stage.ACTION)]
    assert p.running_counts[Stage.ACTION] == 2


@pytest.mark.parametrize("lazy", ["stage", "device"])
def test_lazy_slots_never_exceeds_slots_and_keeps_the_local_property(lazy):
    p = check_slots_at_every_decision(CheckedXInfer(lazy_slots=lazy, slots=(2, 2, 3)))
    trace_decisions(p, 12, 3.0, budgets=(0.070, 0.400), phase_len=10)
    assert p.checked_admissions > 50
    assert make_policy("xinfer_lazy").lazy_slots == "stage"
    assert make_policy("xinfer").lazy_slots == "off"


def test_device_lazy_slots_keeps_an_ordinary_unit_off_an_idle_stage_of_a_busy_device():
    # B's Prefill could start (its slot is free) but A's Action runs: B waits.
    table = additive_table((10, 20, 10), ((0, 0, 0),) * 3)
    p = XInferPolicy(slots=(1, 1, 2), rate_table=table, lazy_slots="device")
    t = 1.0
    p.on_arrival(Request(1, "a", arrival=t - 0.040, budget=BIG), t - 0.040)
    p.on_complete(1, Stage.VIT, t - 0.030)
    p.on_complete(1, Stage.PREFILL, t - 0.005)        # A's Action runs
    out = p.on_arrival(Request(2, "b", arrival=t, budget=BIG), t)
    assert launched(out) == []
    out = p.on_complete(1, Stage.ACTION, t + 0.005)
    assert launched(out) == [(2, Stage.VIT)]


def test_an_unknown_lazy_slots_setting_is_refused_with_the_choices():
    with pytest.raises(ValueError, match="lazy_slots must be one of off, stage, device"):
        XInferPolicy(lazy_slots="yes")
