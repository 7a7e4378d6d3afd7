"""XInfer's SLO-aware stage dispatch: Algorithm 1 with Algorithm 2's priority refresh.

* **Blocking-aware promotion** (§4.3, Alg. 2): request j is promoted when its slack at
  the foreseeable load, σ_j(n_f), is below B_j, the largest predicted remaining time of
  another request's running *ordinary* unit. Promotion persists while j is live (the
  promoted set P). The effective protected set is H = P − L, where L holds requests
  predicted late even in isolation (ℓ_j − t < R_j(0)). The foreseeable load n_f is the
  running units plus protected ready work that free slots can issue.
* **Shared-slack admission** (§4.4, Alg. 1): stages are visited Action, Prefill, ViT;
  protected units start whenever a slot is free; an ordinary unit u at stage s starts
  only if CURRENTFEASIBLE — Δ_h(u) ≤ σ_h(n_f) for every h ∈ H, with n+ = n_f + e_s —
  and FORECASTFEASIBLE — every forecast arrival e during u's estimated execution with
  ℓ_e < ℓ_u keeps δ + f + R_V(n'_e) ≤ b_e. Protection is refreshed after every launch.

Ablation switches (App. C.3) are constructor arguments; see :class:`XInferPolicy`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from xinfer_ros.core.constants import DELTA, FRONTEND_RESERVE
from xinfer_ros.core.policy import Launch, Policy
from xinfer_ros.core.request import Request, check_time
from xinfer_ros.core.stages import Stage

__all__ = ["AdmissionRecord", "XInferPolicy"]


@dataclass(frozen=True, slots=True)
class AdmissionRecord:
    """Snapshot of one ordinary-unit admission (kept only with ``record_admissions``).

    Attributes:
        t: decision time.
        request_id: the admitted request.
        stage: the admitted unit's stage.
        protected: the effective protected set H the checks ran against.
        n_f: the foreseeable load before admission.
        n_plus: n_f + e_s, the load the protected requests were checked at.
        checked: whether the current/forecast checks ran (False under ablations that
            skip them for this unit).
    """

    t: float
    request_id: int
    stage: Stage
    protected: frozenset[int]
    n_f: tuple[int, int, int]
    n_plus: tuple[int, int, int]
    checked: bool


class XInferPolicy(Policy):
    """The XInfer policy (Algorithms 1 and 2) with the paper's ablation switches.

    Args:
        interference: False = "no interference modelling": predict with isolated
            stage durations (actual execution is unaffected).
        strict_priority: True = "strict priority gating": ordinary work waits whenever
            a protected request exists; no slack stealing, no forecast check.
        arrival_aware: False = "no arrival-aware admission": skip FORECASTFEASIBLE.
        entry_only: True = "entry-only admission": the checks apply before ViT only;
            Prefill and Action advance in priority/deadline order as slots allow.
        zero_slack_promotion: True = "zero-slack promotion": B_j = 0.
        frontend_reserve: f (s), added for forecast arrivals only.
        delta: δ (s) used for forecast deadlines.
        record_admissions: keep an :class:`AdmissionRecord` per ordinary admission in
            ``admissions`` (for tests and diagnostics; off on the hot path).
        **kwargs: see :class:`~xinfer_ros.core.policy.Policy` (slots, rate_table, ...).
    """

    name = "xinfer"

    def __init__(
        self,
        *,
        interference: bool = True,
        strict_priority: bool = False,
        arrival_aware: bool = True,
        entry_only: bool = False,
        zero_slack_promotion: bool = False,
        frontend_reserve: float = FRONTEND_RESERVE,
        delta: float = DELTA,
        record_admissions: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(interference=interference, **kwargs)
        self.strict_priority = bool(strict_priority)
        self.arrival_aware = bool(arrival_aware)
        self.entry_only = bool(entry_only)
        self.zero_slack_promotion = bool(zero_slack_promotion)
        self.frontend_reserve = check_time("frontend_reserve", frontend_reserve)
        self.delta = check_time("delta", delta)
        self.record_admissions = bool(record_admissions)
        self.admissions: list[AdmissionRecord] = []
        #: P: promoted requests (persistent while live).
        self._promoted: set[int] = set()
        #: H after the latest refresh.
        self._protected: set[int] = set()
        self._nf: tuple[int, int, int] = (0, 0, 0)
        #: L ∩ P: promoted ids with ℓ_j − t < R_j(0), valid during one decision at _late_t.
        self._late_set_cache: set[int] = set()
        self._late_t = float("nan")
        #: Evaluations of the promotion loop in the latest refresh (Alg. 2 lines 3–9),
        #: and |P0| at its start: the termination bound is |J| − |P0| + 1.
        self.last_refresh_iterations = 0
        self.last_refresh_p0 = 0

    # -- public views -----------------------------------------------------------------------
    @property
    def promoted(self) -> frozenset[int]:
        """P: ids of promoted live requests."""
        return frozenset(self._promoted)

    @property
    def protected(self) -> frozenset[int]:
        """H: the effective protected set after the latest refresh."""
        return frozenset(self._protected)

    @property
    def foreseeable_load(self) -> tuple[int, int, int]:
        """n_f after the latest refresh."""
        return self._nf

    def slack(self, request_id: int, t: float, n: tuple[int, int, int] | None = None) -> float:
        """σ_j(n) = ℓ_j − t − R_j(n) (default n: the latest foreseeable load)."""
        r = self._requests[request_id]
        return r.deadline - t - self.tracker.remaining(r, t, self._nf if n is None else n)

    def blocking_term(self, request_id: int, t: float,
                      n: tuple[int, int, int] | None = None) -> float:
        """B_j: the largest predicted residual of another request's running ordinary unit."""
        if self.zero_slack_promotion:
            return 0.0
        n = self._nf if n is None else n
        tr = self.tracker
        return max((tr.residual(u, t, n) for rid, u in tr.units.items()
                    if rid != request_id and rid not in self._protected), default=0.0)

    # -- Algorithm 2 ---------------------------------------------------------------------------
    def refresh_priority(self, t: float) -> tuple[frozenset[int], tuple[int, int, int]]:
        """Run Algorithm 2 at ``t`` (updates P) and return ``(H, n_f)``."""
        t = self._advance_clock(t)
        self._late_t = float("nan")
        h, nf = self._refresh(t, self.tracker.snapshot(t))
        return frozenset(h), nf

    def _mark_late(self, rids: Iterable[int], t: float,
                   units: dict[int, tuple[float, float, int]]) -> None:
        """Evaluate L membership (ℓ_j − t < R_j(0)) for ``rids`` at ``t``.

        Membership is constant during one decision (a launch at t leaves R_j(0)
        unchanged: τ + h_s − t = h_s), so each promoted request is evaluated once per
        decision, when it is promoted or when the decision starts.
        """
        pred = self.predictor
        suf0, own0 = pred.suffix_tab[0], pred.inv_own[0]
        reqs = self._requests
        late = self._late_set_cache
        for rid in rids:
            r = reqs[rid]
            u = units.get(rid)
            rem = suf0[r.cursor] if u is None else u[0] + u[1] * own0[u[2]] + suf0[u[2] + 1]
            if r.deadline - t < rem:
                late.add(rid)

    def _refresh(
        self, t: float, units: dict[int, tuple[float, float, int]]
    ) -> tuple[set[int], tuple[int, int, int]]:
        """Algorithm 2 at ``t``; ``units`` is the tracker's snapshot at ``t``."""
        reqs = self._requests
        pred = self.predictor
        suffix_tab, inv_own, index = pred.suffix_tab, pred.inv_own, pred.index
        counts = self.tracker.counts
        slots = self.slots
        ready = self._ready
        promoted = self._promoted
        zero_slack = self.zero_slack_promotion
        self.last_refresh_p0 = len(promoted)
        if self._late_t != t:
            self._late_set_cache.clear()
            self._late_t = t
            self._mark_late(promoted, t, units)
        late = self._late_set_cache
        iterations = 0
        while True:
            iterations += 1
            protected = promoted - late if late else set(promoted)
            c0, c1, c2 = counts
            if protected:
                p0 = p1 = p2 = 0
                for rid in protected:
                    cur = reqs[rid].cursor
                    if rid in ready[cur]:
                        if cur == 0:
                            p0 += 1
                        elif cur == 1:
                            p1 += 1
                        else:
                            p2 += 1
                # Protected ready work that free slots can issue joins the load.
                f0, f1, f2 = slots[0] - c0, slots[1] - c1, slots[2] - c2
                c0 += p0 if p0 < f0 else (f0 if f0 > 0 else 0)
                c1 += p1 if p1 < f1 else (f1 if f1 > 0 else 0)
                c2 += p2 if p2 < f2 else (f2 if f2 > 0 else 0)
            nf = (c0, c1, c2)
            i = index(nf)
            suf, inv = suffix_tab[i], inv_own[i]
            # B_j = max residual of another request's running ordinary unit: the top two
            # residuals give "max over others" for every j in O(1).
            b1 = b2 = 0.0
            owner = -1
            resid: dict[int, float] = {}
            for rid, (wait, left, s) in units.items():
                x = wait + left * inv[s]
                resid[rid] = x + suf[s + 1]
                if zero_slack or rid in protected:
                    continue
                if x > b1:
                    b2, b1, owner = b1, x, rid
                elif x > b2:
                    b2 = x
            # σ_j(n_f) < B_j; for a request with no running unit, B_j = b1 and R_j is
            # suf[cursor], so the test is ℓ_j < t + suf[cursor] + b1.
            thr0, thr1, thr2 = t + suf[0] + b1, t + suf[1] + b1, t + suf[2] + b1
            new: list[int] = []
            for rid, r in reqs.items():
                if rid in promoted:
                    continue
                rem = resid.get(rid)
                if rem is None:
                    c = r.cursor
                    if r.deadline < (thr0 if c == 0 else (thr1 if c == 1 else thr2)):
                        new.append(rid)
                elif r.deadline - t - rem < (b2 if rid == owner else b1):
                    new.append(rid)
            if not new:
                break
            promoted.update(new)
            self._mark_late(new, t, units)
        self.last_refresh_iterations = iterations
        self._protected = protected
        self._nf = nf
        return protected, nf

    # -- Algorithm 1 -----------------------------------------------------------------------------
    def _current_feasible(self, protected: set[int], t: float, plus_index: int,
                          units: dict[int, tuple[float, float, int]]) -> bool:
        # Δ_h(u) ≤ σ_h(n_f)  ⟺  R_h(n+) ≤ ℓ_h − t: the same inequality with R_h(n_f)
        # cancelled, which saves one prediction per protected request.
        reqs = self._requests
        suf = self.predictor.suffix_tab[plus_index]
        inv = self.predictor.inv_own[plus_index]
        for rid in protected:
            r = reqs[rid]
            u = units.get(rid)
            if u is None:
                rem = suf[r.cursor]
            else:
                s = u[2]
                rem = u[0] + u[1] * inv[s] + suf[s + 1]
            if rem > r.deadline - t:
                return False
        return True

    def _forecasts(self, t: float, stage: int,
                   nf: tuple[int, int, int]) -> list[tuple[float, float]]:
        """Forecasts during a stage-``stage`` unit's estimated execution.

        Returns ``(forecast deadline ℓ_e, budget b_e)`` pairs in arrival order.
        """
        pred = self.predictor
        # u's estimated execution: its stage time at the others' load n_f.
        end = t + pred.q_tab[pred.index(nf)][stage]
        fc = self.forecaster.between(t, end, self.delta)
        if len(fc) > 1:
            fc.sort()
        return [(ell, b) for _, ell, b in fc]

    def _forecast_feasible(self, req: Request, forecasts: list[tuple[float, float]],
                           n_plus: tuple[int, int, int]) -> bool:
        ell_u = req.deadline
        pred = self.predictor
        suffix_tab, index = pred.suffix_tab, pred.index
        reserve = self.delta + self.frontend_reserve
        nv, np_, na = n_plus
        for ell_e, b in forecasts:
            if ell_e >= ell_u:
                continue  # only forecasts with earlier deadlines are protected
            # R_V(n'_e): the whole pipeline from ViT at the candidate's load plus the
            # earlier retained forecasts' ViT units.
            if reserve + suffix_tab[index((nv, np_, na))][0] > b:
                return False
            nv += 1
        return True

    def _dispatch(self, t: float) -> list[Launch]:
        launches: list[Launch] = []
        ready_qs = self._ready
        counts = self.tracker.counts
        slots = self.slots
        pred = self.predictor
        if self.arrival_aware:
            self.forecaster.prune(t)
        # Events recorded since the last decision may have changed R_j(0): re-evaluate L.
        self._late_t = float("nan")
        units = self.tracker.snapshot(t)
        protected, nf = self._refresh(t, units)
        strict, entry_only = self.strict_priority, self.entry_only
        arrival_aware = self.arrival_aware
        record = self.record_admissions
        for s in (Stage.ACTION, Stage.PREFILL, Stage.VIT):
            ready = ready_qs[s]
            if not ready or counts[s] >= slots[s]:
                continue
            order = sorted(ready.values(),
                           key=lambda r: (r.request_id not in protected, r.deadline, r.request_id))
            deferred: set[int] = set()
            checks = not (entry_only and s != Stage.VIT)
            # Every ordinary candidate of this stage is checked at the same n+ = n_f + e_s
            # against the same H until the next launch, so CURRENTFEASIBLE is evaluated
            # once per (launch, stage) and the forecasts are generated once.
            current_ok: bool | None = None
            forecasts: list[tuple[float, float]] | None = None
            i = 0
            while i < len(order) and counts[s] < slots[s]:
                r = order[i]
                i += 1
                rid = r.request_id
                is_prot = rid in protected
                if not is_prot and checks:
                    if strict:
                        if protected:
                            deferred.add(rid)
                            continue
                    else:
                        if current_ok is None:
                            current_ok = not protected or self._current_feasible(
                                protected, t, pred.plus[pred.index(nf)][s], units)
                        if not current_ok:
                            deferred.add(rid)
                            continue
                        if arrival_aware:
                            if forecasts is None:
                                forecasts = self._forecasts(t, s, nf)
                            if forecasts and not self._forecast_feasible(
                                    r, forecasts,
                                    (nf[0] + (s == 0), nf[1] + (s == 1), nf[2] + (s == 2))):
                                deferred.add(rid)
                                continue
                if record and not is_prot:
                    self.admissions.append(AdmissionRecord(
                        t, rid, s, frozenset(protected), nf,
                        (nf[0] + (s == 0), nf[1] + (s == 1), nf[2] + (s == 2)),
                        checks and not strict))
                launches.append(self._issue(r, s, t, is_prot))
                units[rid] = (pred.h[s], pred.work[s], s)  # just issued: nothing done yet
                protected, nf = self._refresh(t, units)
                current_ok = None
                forecasts = None
                if s != Stage.ACTION and ready:
                    # Prefill and ViT rebuild their order after a launch; work deferred in
                    # this scan stays deferred unless it has become protected.
                    order = sorted(
                        (x for x in ready.values()
                         if x.request_id not in deferred or x.request_id in protected),
                        key=lambda r: (r.request_id not in protected, r.deadline, r.request_id))
                    i = 0
        return launches

    # -- hooks ---------------------------------------------------------------------------------
    def _protected_ids(self) -> frozenset[int]:
        return frozenset(self._protected)

    def _on_removed(self, request: Request) -> None:
        # Keeps P ⊆ J (Alg. 2 line 1) incrementally.
        rid = request.request_id
        self._promoted.discard(rid)
        self._protected.discard(rid)
        self._late_set_cache.discard(rid)
