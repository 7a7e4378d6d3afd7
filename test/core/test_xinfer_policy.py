"""XInfer policy: Figure 6 worked examples, local property, refresh termination, ablations."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from xinfer_ros.core import RateTable, Request, Stage, XInferPolicy, make_policy
from xinfer_ros.sim.decision_trace import trace_decisions

MS = 1e-3
BIG = 10.0  # budget (s) of requests that must never become urgent


def additive_table(work_ms, per_unit_ms, bounds=(4, 4, 4)) -> RateTable:
    """The paper's illustrative additive predictor as a rate table.

    ``per_unit_ms[s][k]``: ms added to a stage-s unit's duration per co-running stage-k
    unit, i.e. W_s / ρ_s(n) = W_s + Σ_k per_unit[s][k] · n_k; no issue overheads.
    """
    w = [x * MS for x in work_ms]
    add = [[x * MS for x in row] for row in per_unit_ms]

    def rho(s, n):
        return w[s] / (w[s] + sum(add[s][k] * n[k] for k in range(3)))

    return RateTable.from_function(rho, work=w, overhead=(0.0, 0.0, 0.0), h_out=0.0,
                                   bounds=bounds)


def req(rid, arrival, budget, robot=None):
    return Request(rid, robot or f"r{rid}", arrival=arrival, budget=budget)


def check_slots_at_every_decision(p):
    """``p`` with its ``schedule`` asserting, after every decision, no stage over its slots."""
    orig = p.schedule

    def checked(t):
        out = orig(t)
        assert all(p.running_counts[s] <= p.slots[s] for s in range(3))
        return out

    p.schedule = checked
    return p


def launched(out):
    return [(ln.request_id, ln.stage) for ln in out.launches]


# ---------------------------------------------------------------------------------------
# Figure 6(a): A with 10 ms slack and B_A = 14 ms is promoted.
# ---------------------------------------------------------------------------------------
def _fig6a(prefill_elapsed_ms: float, table=None, budget_a=0.054, budget_y=BIG, **kwargs):
    """X runs ViT (4 ms left), Y Prefill (20 − elapsed left), Z Action (8 ms left); A arrives
    at t with ℓ_A − t = 50 ms and R_A = 40 ms (no interference, so residuals are exact)."""
    if table is None:
        table = additive_table((10, 20, 10), ((0, 0, 0),) * 3)
    p = XInferPolicy(slots=(1, 2, 2), rate_table=table, **kwargs)
    t = 1.0
    z, y, x, a = 1, 2, 3, 4
    p.on_arrival(req(z, t - 0.200, BIG), t - 0.200)                 # Z ViT
    p.on_complete(z, Stage.VIT, t - 0.190)                          # Z Prefill
    p.on_arrival(req(y, t - 0.100, budget_y), t - 0.100)            # Y ViT
    p.on_complete(y, Stage.VIT, t - prefill_elapsed_ms * MS)        # Y Prefill starts
    p.on_arrival(req(x, t - 0.006, BIG), t - 0.006)                 # X ViT at t − 6 ms
    p.on_complete(z, Stage.PREFILL, t - 0.002)                      # Z Action at t − 2 ms
    assert {r: u.stage for r, u in p.tracker.units.items()} == {
        x: Stage.VIT, y: Stage.PREFILL, z: Stage.ACTION}
    out = p.on_arrival(req(a, t, budget_a), t)                      # ℓ_A − t = 50 ms
    return p, out, t, a


def test_fig6a_blocking_aware_promotion():
    p, out, t, a = _fig6a(prefill_elapsed_ms=6.0)
    assert p.blocking_term(a, t) == pytest.approx(14 * MS)  # max(4, 14, 8)
    assert p.slack(a, t) == pytest.approx(10 * MS)
    assert a in p.promoted and a in out.protected
    assert out.launches == ()  # A is protected but the only ViT slot is busy


def test_fig6a_control_no_promotion_when_blocking_fits_in_slack():
    p, _out, t, a = _fig6a(prefill_elapsed_ms=11.0)  # Prefill now has 9 ms left
    assert p.blocking_term(a, t) == pytest.approx(9 * MS)  # max(4, 9, 8)
    assert p.slack(a, t) == pytest.approx(10 * MS)
    assert a not in p.promoted


def test_protected_requests_units_do_not_count_as_blocking():
    # Y (Prefill, 14 ms left) is itself protected: ℓ_Y − t = 28 ms, R_Y = 14 + 10 ms.
    p, out, t, a = _fig6a(prefill_elapsed_ms=6.0, budget_y=0.132)
    y = 2
    assert y in out.protected
    assert p.blocking_term(a, t) == pytest.approx(8 * MS)  # max(4, 8): Y excluded
    assert a not in p.promoted


def test_fig6a_zero_slack_ablation_does_not_promote():
    p, out, t, a = _fig6a(prefill_elapsed_ms=6.0, zero_slack_promotion=True)
    assert p.blocking_term(a, t) == 0.0
    assert p.slack(a, t) == pytest.approx(10 * MS)
    assert a not in p.promoted and a not in out.protected


@pytest.mark.parametrize("zero_slack, budget_ms, promoted", [
    (True, 74, True),    # ℓ_A − t = 70 ms < R_A(n_f) = 90 ms: σ < 0
    (True, 99, False),   # σ = +5 ms: zero-slack promotion waits
    (False, 99, True),   # ... while blocking-aware promotion sees B_A ≥ 14 ms > 5 ms
])
def test_zero_slack_promotion_uses_a_zero_blocking_term(zero_slack, budget_ms, promoted):
    # Every running ViT/Prefill unit adds 10 ms to Action: R_A(0) = 70 ms, R_A(n_f) = 90 ms.
    table = additive_table((10, 20, 40), ((0, 0, 0), (0, 0, 0), (10, 10, 0)))
    p, out, _t, a = _fig6a(6.0, table=table, budget_a=budget_ms * MS,
                           zero_slack_promotion=zero_slack)
    assert (a in p.promoted) is promoted
    assert (a in out.protected) is promoted  # R_A(0) = 70 ms fits: not in L


# ---------------------------------------------------------------------------------------
# Figure 6(b): after u is admitted A keeps 4 ms and v is deferred.
# ---------------------------------------------------------------------------------------
def _fig6b(with_u: bool = True, **kwargs):
    # ViT/Prefill unaffected by load; every running ViT or Prefill unit adds 6 ms to Action.
    table = additive_table((10, 10, 40), ((0, 0, 0), (0, 0, 0), (6, 6, 0)))
    p = XInferPolicy(slots=(2, 2, 1), rate_table=table, **kwargs)
    t = 1.0
    a, z, u, v = 1, 2, 3, 4
    p.on_arrival(req(a, t - 0.100, 0.154), t - 0.100)   # ℓ_A = t + 50 ms
    p.on_arrival(req(z, t - 0.100, 0.149), t - 0.100)   # ℓ_Z = t + 45 ms
    p.complete(a, Stage.VIT, t - 0.090)
    p.complete(z, Stage.VIT, t - 0.090)
    p.schedule(t - 0.090)
    if with_u:
        p.on_arrival(req(u, t - 0.030, BIG), t - 0.030)  # U's ViT runs until t
    p.complete(a, Stage.PREFILL, t - 0.020)
    p.complete(z, Stage.PREFILL, t - 0.020)
    out = p.schedule(t - 0.020)
    assert launched(out) == [(z, Stage.ACTION)]          # earlier deadline gets the slot
    assert a in out.protected                            # Z's Action blocks A
    if with_u:
        p.complete(u, Stage.VIT, t)                      # u: U's Prefill becomes ready
    p.add_request(req(v, t, BIG), t)                     # v: V's ViT
    return p, p.schedule(t), t, (a, z, u, v)


def test_fig6b_shared_slack_refreshed_after_each_launch():
    p, out, t, (a, _z, u, v) = _fig6b()
    assert launched(out) == [(u, Stage.PREFILL)]         # Δ_A(u) = 6 ≤ 10: admitted
    assert a in out.protected
    assert p.slack(a, t) == pytest.approx(4 * MS)        # 10 − 6 left
    assert [r.request_id for r in p.ready_queue(Stage.VIT)] == [v]  # Δ_A(v) = 6 > 4


def test_fig6b_v_alone_is_admitted_against_the_original_snapshot():
    p, out, t, (a, _z, _u, v) = _fig6b(with_u=False)
    assert p.slack(a, t) == pytest.approx(4 * MS)
    assert launched(out) == [(v, Stage.VIT)]


def test_fig6b_strict_priority_gating_defers_both():
    _p, out, _t, (a, *_rest) = _fig6b(strict_priority=True)
    assert a in out.protected
    assert out.launches == ()


# ---------------------------------------------------------------------------------------
# Figure 6(c): w passes the current check and is deferred for an earlier-deadline forecast.
# ---------------------------------------------------------------------------------------
def _fig6c(tight_history: bool, **kwargs):
    # Every co-running unit adds 5 ms to every stage: R_V(n) = 70 ms + 15 ms · Σn.
    table = additive_table((20, 20, 30), ((5, 5, 5),) * 3)
    p = XInferPolicy(slots=(2, 2, 2), rate_table=table, **kwargs)
    t = 1.0
    if tight_history:
        p.forecaster.observe(t - 0.170, 0.090)  # next 90 ms request forecast at t + 10 ms
    return p, p.on_arrival(req(7, t, 0.400), t), t


def test_fig6c_arrival_aware_admission_defers_w():
    _p, out, _ = _fig6c(tight_history=True)
    # w's ViT would run 20 ms; the forecast e at t + 10 ms has ℓ_e < ℓ_w, and with w
    # running δ + f + R_V = 4 + 8.5 + 85 = 97.5 ms > 90 ms.
    assert out.launches == ()
    assert out.protected == frozenset()  # no protected request: the current check passes


def test_fig6c_controls():
    _, out, _ = _fig6c(tight_history=False)
    assert launched(out) == [(7, Stage.VIT)]
    _, out, _ = _fig6c(tight_history=True, arrival_aware=False)
    assert launched(out) == [(7, Stage.VIT)]


def test_fig6c_forecast_with_later_deadline_is_ignored():
    p, out, _ = _fig6c(tight_history=False)
    t = 2.0
    p2 = XInferPolicy(slots=(2, 2, 2), rate_table=p.predictor.table)
    p2.forecaster.observe(t - 0.170, 0.090)
    # w's own deadline (ℓ = t + 56 ms) precedes the forecast's (t + 96 ms): not retained.
    out = p2.on_arrival(req(8, t, 0.060), t)
    assert launched(out) == [(8, Stage.VIT)]


# ---------------------------------------------------------------------------------------
# Local property (§4.4) and termination of the priority refresh (App. C.1)
# ---------------------------------------------------------------------------------------
class CheckedXInfer(XInferPolicy):
    """Checks, with the public predictor API, the §4.4 local property at every ordinary
    admission and the |J| − |P0| + 1 bound at every refresh."""

    def __init__(self, **kwargs):
        super().__init__(record_admissions=True, **kwargs)
        self.checked_admissions = 0
        self.protected_admissions = 0
        self.refreshes = 0
        self.max_iterations = 0

    def _issue(self, request, stage, t, protected=False):
        if not protected and self.admissions and self.admissions[-1].request_id == \
                request.request_id and self.admissions[-1].stage == stage:
            rec = self.admissions[-1]
            if rec.checked:
                self.checked_admissions += 1
                self.protected_admissions += bool(rec.protected)
                for h in rec.protected:
                    r = self.requests[h]
                    rem = self.tracker.remaining(r, t, rec.n_plus)
                    assert t + rem <= r.deadline + 1e-12, (h, t, rem, r.deadline)
        return super()._issue(request, stage, t, protected)

    def _refresh(self, t, units):
        live = len(self.requests)
        h, nf = super()._refresh(t, units)
        assert self.last_refresh_p0 <= live
        assert 1 <= self.last_refresh_iterations <= live - self.last_refresh_p0 + 1
        self.refreshes += 1
        self.max_iterations = max(self.max_iterations, self.last_refresh_iterations)
        return h, nf


events = st.lists(
    st.tuples(
        st.sampled_from(["arrive", "arrive", "complete", "complete", "tick"]),
        st.floats(0.0, 0.015),                                  # time step (s)
        st.sampled_from([0.035, 0.05, 0.07, 0.09, 0.12, 0.4]),  # budget
        st.integers(0, 50),                                     # which running unit
    ),
    min_size=5, max_size=60)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events=events, slots=st.tuples(st.integers(1, 3), st.integers(1, 3),
                                      st.integers(1, 3)),
       interference=st.booleans(), zero_slack=st.booleans())
def test_local_property_and_termination_on_random_states(events, slots, interference,
                                                         zero_slack):
    p = CheckedXInfer(slots=slots, interference=interference,
                      zero_slack_promotion=zero_slack)
    t, rid = 0.0, 0
    for kind, dt, budget, pick in events:
        t += dt
        if kind == "arrive":
            p.on_arrival(req(rid, t, budget), t)
            rid += 1
        elif kind == "complete" and p.tracker.units:
            units = sorted(p.tracker.units.items())
            r, unit = units[pick % len(units)]
            p.on_complete(r, unit.stage, t)
        else:
            p.on_tick(t)
        assert all(p.running_counts[s] <= p.slots[s] for s in range(3))
    assert p.refreshes > 0


def test_local_property_on_a_closed_loop_trace():
    # Overloaded fleet: many protected requests, many checked ordinary admissions.
    p = CheckedXInfer()
    trace_decisions(p, 20, 6.0, budgets=(0.070, 0.400), phase_len=10)
    assert p.checked_admissions > 200
    assert p.protected_admissions > 50  # the property was exercised with H ≠ ∅
    assert p.max_iterations >= 2        # promotions cascaded within one refresh


def test_promotion_persists_while_live_and_is_dropped_after():
    p, _, t, a = _fig6a(prefill_elapsed_ms=6.0)
    assert a in p.promoted
    p.on_complete(2, Stage.PREFILL, t + 0.014)  # the blocking unit finishes
    assert a in p.promoted  # persistent
    p.remove_request(a, t + 0.015)
    assert a not in p.promoted


def test_late_request_is_promoted_but_not_protected():
    p = XInferPolicy(slots=(1, 1, 1))
    p.on_arrival(req(1, 0.0, BIG), 0.0)  # occupies the ViT slot
    # 20 ms budget < R(0) ≈ 30 ms: predicted late even in isolation.
    out = p.on_arrival(req(2, 0.001, 0.020), 0.001)
    assert 2 in p.promoted
    assert 2 not in out.protected


@pytest.mark.parametrize("name", ["xinfer", "xinfer_no_interference", "xinfer_strict_priority",
                                  "xinfer_no_arrival", "xinfer_entry_only",
                                  "xinfer_zero_slack"])
def test_variants_run_closed_loop_within_slots(name):
    p = check_slots_at_every_decision(make_policy(name, slots=(2, 2, 3)))
    res = trace_decisions(p, 12, 3.0)
    assert len(res.latencies) > 100


def test_entry_only_skips_checks_after_vit():
    p, out, _t, (_a, _z, u, v) = _fig6b(entry_only=True, record_admissions=True)
    # u (Prefill) advances without checks; v (ViT) is still checked and deferred.
    assert launched(out) == [(u, Stage.PREFILL)]
    assert [r.request_id for r in p.ready_queue(Stage.VIT)] == [v]
    last = p.admissions[-1]
    assert (last.request_id, last.stage, last.checked) == (u, Stage.PREFILL, False)


def test_no_interference_ablation_predicts_isolated_durations():
    p = XInferPolicy(interference=False)
    q = p.predictor
    assert q.q(Stage.ACTION, (4, 4, 6)) == pytest.approx(q.isolated_duration(Stage.ACTION))
