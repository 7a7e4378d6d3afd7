"""Progress-aware remaining-time predictor (paper Eq. 8–10).

* ``q_s(n) = h_s + W_s / ρ_s(n̄)``, ``n̄`` clipped to the calibrated bounds (Eq. 8).
* A running unit integrates completed work ``ŵ`` at the rate of the scheduler-observed
  concurrency *without its own unit*, over the intervals between observed transitions
  (launches and completions), starting at its modelled compute start ``τ + h_s`` (Eq. 9).
* ``R_j(n) = h_out + r_{j,s}(n) + Σ_{k>s} q_k(n)``: the current stage's residual (or
  full ``q_s`` when it has not started) plus all later stages at the same projected load
  ``n`` (Eq. 10). Future queueing is not predicted.

Optional online correction (:mod:`xinfer_ros.core.rate_correction`, off unless a
:class:`RateCorrection` is attached): the tracker reports each completed unit's
integrated work ``ŵ / W_s`` and the predictor scales the work ``W_s → k_s · W_s``, so
every consumer of its tables (policies, simulator, engine audit) sees the corrected
durations. Without a correction the tables are exactly the calibrated ones.

The :class:`ProgressTracker` owns the running units and the observed counts ``n_r``; a
policy tells it about every launch and completion, in time order. Predictions only use
transitions already observed, so future events cannot change them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from xinfer_ros.core.errors import SchedulerStateError
from xinfer_ros.core.progress import progress
from xinfer_ros.core.rate_correction import RateCorrection
from xinfer_ros.core.rate_table import RateTable
from xinfer_ros.core.request import Request
from xinfer_ros.core.stages import NUM_STAGES, Stage

__all__ = ["Predictor", "ProgressTracker", "RunningUnit"]


class Predictor:
    """Stage-time model over one :class:`RateTable`, with lookup tables precomputed.

    Counts vectors are any 3-sequences ``(n_V, n_P, n_A)`` of ints; out-of-bound and
    negative counts are clipped. All times are seconds.

    Args:
        table: the calibrated rate table.
        interference: False gives the "no interference modelling" ablation: every rate
            is 1, i.e. isolated stage durations, whatever the load.
        correction: optional online rate correction (see :meth:`set_correction`).
    """

    __slots__ = ("_base", "_grid", "_rho", "_sp", "_sv", "base_work", "bounds", "correction",
                 "h", "h_out", "interference", "inv_own", "inv_rho", "plus", "q_tab",
                 "suffix_tab", "table", "work")

    def __init__(self, table: RateTable, *, interference: bool = True,
                 correction: RateCorrection | None = None) -> None:
        self.table = table if interference else RateTable.isolated(table)
        self.interference = interference
        #: Calibrated work W_s; ``work`` is the corrected k_s · W_s the lookups use.
        self.base_work: tuple[float, float, float] = table.work
        self.work: tuple[float, float, float] = table.work
        self.h: tuple[float, float, float] = table.overhead
        self.h_out: float = table.h_out
        self.bounds: tuple[int, int, int] = table.bounds
        c = self.bounds
        # The flat tables span 0..c+1 per stage, not 0..c: any count above c+1 has the
        # same lookups as c+1 (its rate clips to c, and so does the count minus its own
        # unit), so clipping there keeps "remove own unit, then clip" exact while every
        # lookup stays a single list index.
        g = (c[0] + 1, c[1] + 1, c[2] + 1)
        self._grid = g
        self._sp = g[2] + 1
        self._sv = (g[1] + 1) * self._sp
        size = (g[0] + 1) * self._sv
        rates = self.table.rates
        w, h, ho = self.work, self.h, self.h_out
        inv: list[tuple[float, float, float]] = [(1.0, 1.0, 1.0)] * size
        rho_at: list[tuple[float, float, float]] = [(1.0, 1.0, 1.0)] * size
        q: list[tuple[float, float, float]] = [(0.0, 0.0, 0.0)] * size
        suf: list[tuple[float, float, float, float]] = [(0.0, 0.0, 0.0, 0.0)] * size
        cells = [(v, p, a) for v in range(g[0] + 1) for p in range(g[1] + 1)
                 for a in range(g[2] + 1)]
        for v, p, a in cells:
            rho = rates[(min(v, c[0]), min(p, c[1]), min(a, c[2]))]
            i = v * self._sv + p * self._sp + a
            rho_at[i] = rho
            inv[i] = (1.0 / rho[0], 1.0 / rho[1], 1.0 / rho[2])
            qv, qp, qa = h[0] + w[0] / rho[0], h[1] + w[1] / rho[1], h[2] + w[2] / rho[2]
            q[i] = (qv, qp, qa)
            # suffix[s] = h_out + Σ_{k>=s} q_k: R_j of a request whose stage s has not started.
            suf[i] = (ho + qa + qp + qv, ho + qa + qp, ho + qa, ho)
        self.inv_rho = inv
        self.q_tab = q
        self.suffix_tab = suf
        own: list[tuple[float, float, float]] = [(1.0, 1.0, 1.0)] * size
        plus: list[tuple[int, int, int]] = [(0, 0, 0)] * size
        for v, p, a in cells:
            i = v * self._sv + p * self._sp + a
            # 1/ρ_s(n − e_s): the rate of a running stage-s unit when n includes it.
            own[i] = (inv[self.index((v - 1, p, a))][0], inv[self.index((v, p - 1, a))][1],
                      inv[self.index((v, p, a - 1))][2])
            # Index of n + e_s, for n+ = n_f + e_s without rebuilding the vector.
            plus[i] = (self.index((v + 1, p, a)), self.index((v, p + 1, a)),
                       self.index((v, p, a + 1)))
        self.inv_own = own
        self.plus = plus
        self._rho = rho_at
        #: The calibrated (work, q, suffix) tables, restored exactly without a correction.
        self._base = (self.work, q, suf)
        self.correction: RateCorrection | None = None
        if correction is not None:
            self.set_correction(correction)

    # -- online correction --------------------------------------------------------------
    def set_correction(self, correction: RateCorrection | None) -> None:
        """Attach (or with None detach) an online rate correction and apply it now.

        Detaching restores the calibrated tables exactly (the same objects).
        """
        self.correction = correction
        self.apply_correction()

    def apply_correction(self) -> None:
        """Rebuild the work-dependent tables from the correction's published factors.

        Only ``work``, ``q_tab`` and ``suffix_tab`` depend on W_s; the rate tables
        (and so the tracker's integrated progress ŵ) stay calibrated. Consumers read
        the table attributes afresh on every decision, so the swap takes effect at the
        next one.
        """
        corr = self.correction
        factors = corr.factors if corr is not None else (1.0, 1.0, 1.0)
        if factors == (1.0, 1.0, 1.0):
            self.work, self.q_tab, self.suffix_tab = self._base
            return
        b = self.base_work
        w = (b[0] * factors[0], b[1] * factors[1], b[2] * factors[2])
        h, ho = self.h, self.h_out
        q: list[tuple[float, float, float]] = []
        suf: list[tuple[float, float, float, float]] = []
        for rho in self._rho:
            qv, qp, qa = h[0] + w[0] / rho[0], h[1] + w[1] / rho[1], h[2] + w[2] / rho[2]
            q.append((qv, qp, qa))
            suf.append((ho + qa + qp + qv, ho + qa + qp, ho + qa, ho))
        self.work, self.q_tab, self.suffix_tab = w, q, suf

    # -- lookups ------------------------------------------------------------------------
    def index(self, n: Sequence[int]) -> int:
        """Flat index of ``n`` into the precomputed tables (counts clipped, see above)."""
        c = self._grid
        v, p, a = n[0], n[1], n[2]
        v = 0 if v < 0 else (c[0] if v > c[0] else v)
        p = 0 if p < 0 else (c[1] if p > c[1] else p)
        a = 0 if a < 0 else (c[2] if a > c[2] else a)
        return v * self._sv + p * self._sp + a

    def rate(self, stage: int, n: Sequence[int]) -> float:
        """ρ_s(n̄), n̄ = n clipped to the bounds."""
        return 1.0 / self.inv_rho[self.index(n)][stage]

    def q(self, stage: int, n: Sequence[int]) -> float:
        """q_s(n) = h_s + W_s / ρ_s(n̄): duration of a not-yet-started stage at load n."""
        return self.q_tab[self.index(n)][stage]

    def suffix(self, n: Sequence[int]) -> tuple[float, float, float, float]:
        """``(R from V, R from P, R from A, h_out)`` for a request whose stage has not started."""
        return self.suffix_tab[self.index(n)]

    def isolated_duration(self, stage: int) -> float:
        """h_s + W_s: a stage's duration alone on the GPU."""
        return self.h[stage] + self.work[stage]

    def isolated_request(self) -> float:
        """R_j(0) of a request whose ViT has not started: every stage alone, then output.

        The same entry the XInfer policy's late set L compares slack against.
        """
        return self.suffix_tab[0][0]

    def isolated_base_duration(self, stage: int) -> float:
        """h_s + W_s of the calibrated table, without any online correction."""
        return self.h[stage] + self.base_work[stage]


@dataclass(slots=True, eq=False)
class RunningUnit:
    """One issued, not yet completed stage unit.

    Attributes:
        request: the request it belongs to.
        stage: its stage.
        issued: issue time τ_{j,s}.
        compute_start: modelled compute start b_{j,s} = τ_{j,s} + h_s.
        work: completed work ŵ at the tracker's last transition (isolation-time seconds).
    """

    request: Request
    stage: Stage
    issued: float
    compute_start: float
    work: float = 0.0


class ProgressTracker:
    """Running units, observed counts n_r and their integrated progress (Eq. 9).

    Args:
        predictor: supplies W, h and the rate lookups.
    """

    __slots__ = ("counts", "cur_rate", "last", "predictor", "units")

    def __init__(self, predictor: Predictor) -> None:
        self.predictor = predictor
        #: n_r: scheduler-observed running units per stage.
        self.counts: list[int] = [0, 0, 0]
        #: request_id -> its running unit (a request runs at most one unit at a time).
        self.units: dict[int, RunningUnit] = {}
        #: Time of the last observed transition; work is integrated up to here.
        self.last: float = float("-inf")
        #: ρ_s(n_r − e_s) for each stage: the current rate of a running stage-s unit.
        self.cur_rate: list[float] = [1.0, 1.0, 1.0]
        self._refresh_rates()

    def _refresh_rates(self) -> None:
        own = self.predictor.inv_own[self.predictor.index(self.counts)]
        self.cur_rate = [1.0 / own[0], 1.0 / own[1], 1.0 / own[2]]

    def advance(self, t: float) -> None:
        """Integrate every running unit's work up to ``t`` at the current rates."""
        last = self.last
        if t <= last:
            return
        rate = self.cur_rate
        for u in self.units.values():
            u.work += progress(rate[u.stage], u.compute_start, last, t)
        self.last = t

    def start(self, request: Request, stage: Stage, t: float) -> RunningUnit:
        """Record a launch at ``t`` (a transition: integrates first, then counts it)."""
        rid = request.request_id
        if rid in self.units:
            raise SchedulerStateError(f"request {rid} already runs {self.units[rid].stage.name}; "
                                      f"cannot also start {stage.name}")
        self.advance(t)
        unit = RunningUnit(request, stage, t, t + self.predictor.h[stage])
        self.units[rid] = unit
        self.counts[stage] += 1
        self._refresh_rates()
        return unit

    def _unit(self, request_id: int) -> RunningUnit:
        """``request_id``'s running unit.

        Raises:
            SchedulerStateError: the request has no running unit.
        """
        unit = self.units.get(request_id)
        if unit is None:
            raise SchedulerStateError(f"request {request_id} has no running unit")
        return unit

    def defer(self, request_id: int) -> None:
        """Mark ``request_id``'s just launched unit as waiting: no work until :meth:`restart`.

        A batch-forming policy's unit waits after its launch until its batch starts (a
        free lane, a hold for mates; issue 28). While it waits its compute start is
        infinite, so it integrates no work, and every prediction treats it as starting
        now: issue overhead h_s still to come, all its work left. It counts in the load
        as a launched unit does (the table's ρ_s(n) spreads the launched units over the
        lanes in batches).

        Raises:
            SchedulerStateError: the request has no running unit.
        """
        unit = self._unit(request_id)
        unit.compute_start = math.inf
        unit.work = 0.0

    def restart(self, request_id: int, t: float) -> None:
        """Anchor ``request_id``'s unit to a compute start at ``t`` + h_s, no work done.

        Its batch starts at ``t``: from now on it works, so the prediction of its end, and
        the online correction's observation at its completion, count only the time it
        runs, not the time it waited (:meth:`defer`). The load counts do not change (the
        unit was counted from its launch), so neither do the rates.

        Raises:
            SchedulerStateError: the request has no running unit.
        """
        unit = self._unit(request_id)
        self.advance(t)
        unit.compute_start = t + self.predictor.h[unit.stage]
        unit.work = 0.0

    def record_completion(self, request_id: int, t: float) -> bool:
        """Feed the online correction with ``request_id``'s unit completing at ``t``.

        Call it just before :meth:`finish` for a real completion (never for an abort
        or a removal: a partial unit says nothing about the rate). The observation is
        the work integrated at the calibrated rates over the unit's life (from its
        batch's start when it was deferred, :meth:`restart`), divided by the
        calibrated W_s (see :mod:`xinfer_ros.core.rate_correction`).
        A no-op without a correction.

        Returns:
            True when the predictor's tables changed (other predictors sharing the
            same correction should :meth:`Predictor.apply_correction`).
        """
        pred = self.predictor
        corr = pred.correction
        unit = self.units.get(request_id)
        if corr is None or unit is None or unit.compute_start == math.inf:
            return False  # a unit never started (deferred) did no work to learn from
        s = unit.stage
        if not corr.observe(s, self.work_done(unit, t) / pred.base_work[s]):
            return False
        pred.apply_correction()
        return True

    def finish(self, request_id: int, t: float) -> RunningUnit:
        """Record the completion (or abort) of ``request_id``'s unit at ``t``."""
        unit = self._unit(request_id)
        self.advance(t)
        del self.units[request_id]
        self.counts[unit.stage] -= 1
        self._refresh_rates()
        return unit

    # -- predictions ----------------------------------------------------------------------
    def snapshot(self, t: float) -> dict[int, tuple[float, float, int]]:
        """Per running unit at ``t``: ``(issue overhead left, work left, stage)``.

        Both are independent of the supplied load, so one snapshot serves every
        prediction at ``t``: ``r̃ = wait + left / ρ_s(n − e_s)``. Launches at ``t`` do not
        change the entries of units already running (work is integrated up to ``t``
        before the rates change).
        """
        out: dict[int, tuple[float, float, int]] = {}
        last, rate, w, h = self.last, self.cur_rate, self.predictor.work, self.predictor.h
        for rid, u in self.units.items():
            s = u.stage
            done = u.work + progress(rate[s], u.compute_start, last, t)
            # A deferred unit (compute start infinite) starts now.
            wait = h[s] if u.compute_start == math.inf else u.compute_start - t
            left = w[s] - done
            out[rid] = (wait if wait > 0.0 else 0.0, left if left > 0.0 else 0.0, s)
        return out

    def work_done(self, unit: RunningUnit, t: float) -> float:
        """ŵ_{j,s}(t): completed work, integrating past ``last`` at the current rate."""
        return unit.work + progress(self.cur_rate[unit.stage], unit.compute_start, self.last, t)

    def residual(self, unit: RunningUnit, t: float, n: Sequence[int]) -> float:
        """r̃_{j,s}(t, n) (Eq. 9): issue overhead left plus remaining work at ρ_s(n − e_s).

        ``n`` is the supplied load *including* this unit; its own count is removed.
        """
        return self.residual_at(unit, t, self.predictor.index(n))

    def residual_at(self, unit: RunningUnit, t: float, i: int) -> float:
        """:meth:`residual` at the flat table index ``i`` of the load (``Predictor.index``).

        For callers that predict many units at one load: the index is looked up once.
        """
        s = unit.stage
        pred = self.predictor
        cs = unit.compute_start
        wait = pred.h[s] if cs == math.inf else cs - t  # a deferred unit starts now
        left = pred.work[s] - self.work_done(unit, t)
        if left <= 0.0:
            return wait if wait > 0.0 else 0.0
        return (wait if wait > 0.0 else 0.0) + left * pred.inv_own[i][s]

    def remaining(self, request: Request, t: float, n: Sequence[int]) -> float:
        """R_j(n) (Eq. 10) at time ``t`` for a live request: 0 for a finished one."""
        return self.remaining_at(request, t, self.predictor.index(n))

    def remaining_at(self, request: Request, t: float, i: int) -> float:
        """:meth:`remaining` at the flat table index ``i`` of the load."""
        s = request.cursor
        if s >= NUM_STAGES:
            return 0.0
        unit = self.units.get(request.request_id)
        suf = self.predictor.suffix_tab[i]
        if unit is None:
            return suf[s]
        return self.residual_at(unit, t, i) + suf[s + 1]
