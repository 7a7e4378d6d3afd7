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

* **Slot-aware admission** (our extension, ``slot_aware=True`` by default; False gives
  the paper's checks as written): an admitted ordinary stage-s unit also holds one of
  stage s's slots until it completes. The checks add the predicted wait for a stage-s
  slot to every protected request (and retained forecast) that still has to run s:
  slots free at the running units' predicted residuals, demands are served in order
  of predicted arrival at s. Without it, an ordinary unit may take the last Prefill
  slot just before a protected request needs it.

Ablation switches (App. C.3) and the experimental, default-off extensions
(``arrival_projection``, ``forecast_load``) are constructor arguments; see
:class:`XInferPolicy`.
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_left
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from operator import attrgetter
from typing import TYPE_CHECKING

from xinfer_ros.core.batch_cost import BatchCost
from xinfer_ros.core.batch_formation import BatchPlan, form_batch_of
from xinfer_ros.core.batching import lanes_for
from xinfer_ros.core.constants import DELTA, FRONTEND_RESERVE
from xinfer_ros.core.errors import SchedulerStateError
from xinfer_ros.core.policy import Launch, Policy, PolicyOptions, SlotCounts
from xinfer_ros.core.rate_table import default_rate_table
from xinfer_ros.core.request import Request, check_time
from xinfer_ros.core.saturation import SaturationMeter, SaturationSettings, SaturationSummary
from xinfer_ros.core.stages import Stage
from xinfer_ros.core.timing import deadline

if TYPE_CHECKING:  # typing.Unpack is 3.11+ (setup.py allows 3.10): annotations only
    from typing import Unpack

__all__ = ["LAZY_SLOTS", "MAX_ADMISSION_RECORDS", "AdmissionRecord", "XInferPolicy",
           "batch_former", "check_lazy_slots"]

#: Admission records kept with ``record_admissions`` (the latest; older ones drop).
MAX_ADMISSION_RECORDS = 10_000
#: ``lazy_slots`` settings: when ordinary work waits instead of taking a free slot.
LAZY_SLOTS: tuple[str, ...] = ("off", "stage", "device")


def check_lazy_slots(value: str) -> str:
    """``value`` if it is one of :data:`LAZY_SLOTS`.

    Raises:
        ValueError: naming the choices.
    """
    if value not in LAZY_SLOTS:
        raise ValueError(f"lazy_slots must be one of {', '.join(LAZY_SLOTS)}, got {value!r}")
    return value


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


class _SlotContext:
    """Stage-``s`` slot free times and protected demands for one slot-aware check."""

    __slots__ = ("_make_times", "_times", "demands", "service", "stage")

    def __init__(self, stage: int, make_times: Callable[[], list[float]], service: float,
                 demands: list[tuple[float, float]]) -> None:
        self.stage = stage
        self._make_times = make_times
        self._times: list[float] | None = None  # built on first need
        self.service = service
        self.demands = demands

    @property
    def times(self) -> list[float]:
        """Sorted slot free times (a valid heap); built only when a demand exists."""
        if self._times is None:
            times = self._make_times()
            times.sort()
            self._times = times
        return self._times

    def feasible(self, extra: Iterable[tuple[float, float]] = ()) -> bool:
        """Every demand ``(arrival at s, spare)`` gets a slot within its spare time.

        Demands are served in arrival order (ties: least spare first) on the earliest
        free slot, each holding it for ``service`` (q_s at n+).
        """
        demands = self.demands
        if extra:
            demands = [*demands, *extra]
        if not demands:
            return True
        if len(demands) > 1:
            demands = sorted(demands)
        times = list(self.times)
        service = self.service
        for arr, spare in demands:
            free = heapq.heappop(times)
            if free > arr:
                if free - arr > spare:
                    return False
                heapq.heappush(times, free + service)
            else:
                heapq.heappush(times, arr + service)
        return True


class _StageScan:
    """What the ordinary candidates of one stage share until the next launch.

    CURRENTFEASIBLE, the slot context and the forecasts depend on H and n_f, which
    change only with a launch, so one scan is built per (stage, launch). A plain slotted
    class, not a dataclass: one is built per stage visit and per launch of every
    decision, and the generated ``__init__`` with its default factories cost µs there.

    Attributes:
        stage: The stage being dispatched.
        nf: n_f: the load the scheduler observes.
        nf_index: ``Predictor.index(nf)`` (the refresh looked it up already).
        plus: n+ = n_f + e_stage: the load with the candidate's unit.
        current_ok: CURRENTFEASIBLE's (and the slot check's) answer, once evaluated.
        slot_ctx: The stage's slot state (slot-aware only).
        forecasts: ``(ℓ_e, b_e)`` of arrivals during the unit, once generated.
        projected: Per forecast, the load at its arrival (arrival projection only).
        forecast_ells: The forecasts' deadlines, sorted.
        forecast_memo: FORECASTFEASIBLE by the number of retained forecasts.
    """

    __slots__ = ("current_ok", "forecast_ells", "forecast_memo", "forecasts", "nf", "nf_index",
                 "plus", "projected", "slot_ctx", "stage")

    def __init__(self, stage: Stage, nf: tuple[int, int, int], nf_index: int) -> None:
        self.stage = stage
        self.nf = nf
        self.nf_index = nf_index
        nv, np_, na = nf
        self.plus = (nv + (stage == 0), np_ + (stage == 1), na + (stage == 2))
        self.current_ok: bool | None = None
        self.slot_ctx: _SlotContext | None = None
        self.forecasts: list[tuple[float, float]] | None = None
        self.projected: list[tuple[int, int, int]] | None = None
        self.forecast_ells: list[float] = []
        self.forecast_memo: dict[int, bool] = {}


#: Sort key of ready requests within a priority class: deadline, then id.
_BY_DEADLINE = attrgetter("deadline", "request_id")


def _by_priority(ready: Iterable[Request], protected: set[int]) -> list[Request]:
    """Ready requests in Alg. 1's order: protected first, then by deadline, then id.

    One sort by (deadline, id), then a stable split: cheaper than a Python key per
    request on every stage visit of every decision.
    """
    order = sorted(ready, key=_BY_DEADLINE)
    if protected:
        first = [r for r in order if r.request_id in protected]
        if first:
            first += [r for r in order if r.request_id not in protected]
            return first
    return order


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
        slot_aware: True (default) = slot-aware admission, our extension of Alg. 1:
            an ordinary unit of stage s also occupies one of s's *slots* until it
            completes, so CURRENTFEASIBLE / FORECASTFEASIBLE add to each protected
            request's R_h(n+) (and each retained forecast's R_V(n'_e)) the predicted
            wait for a stage-s slot after the unit is admitted. False = the paper's
            checks as written, which count interference only.
        arrival_projection: True = an experimental extension (off by default: it
            lets XInfer match FIFO on parcel at 14 robots but costs phases capacity,
            see the simulator ablation): FORECASTFEASIBLE
            evaluates a forecast arrival e at the load *projected to e's arrival*
            (a_e + f): every request in the pipeline (running, or protected and ready)
            is advanced through its predicted stage times, requests predicted to have
            left by then do not count, and the candidate counts at the stage it is
            predicted to be in. False = the paper's n'_e = n_f + e_s (+ the earlier
            retained forecasts' ViT units), i.e. the instantaneous load, which charges
            units about to finish against a pipeline that starts later.
        forecast_load: True = an experimental extension (off by default: it lowered
            attainment on both workloads in the simulator): the k retained forecast
            arrivals (those FORECASTFEASIBLE checks: arriving during u's execution with
            ℓ_e < ℓ_u) will be protected on arrival and start whatever ordinary work
            runs, so CURRENTFEASIBLE is also checked at n+ + k·e_V. False = the
            paper, where forecasts are checked only for their own feasibility.
        phase_budget: An experiment (off by default; issue 20, item 5): a request whose
            budget exceeds this (s) is scheduled, and forecast, as if its budget were
            this, so that wide work finishes early enough not to move its robot's Eq. 1
            send phase (``T_E``: the response returns by ``s + T_E``). The request's
            ``budget`` and ``deadline`` are rewritten on arrival; the robot's own
            budget, and so its attainment, is unchanged. In the simulator it lifts
            parcel at 14 robots but gives up the slack that wins phases.
        frontend_reserve: f (s), added for forecast arrivals only.
        delta: δ (s) used for forecast deadlines.
        max_batch: most launched units of a stage :meth:`plan_batch` puts in one batch
            (issue 28); above one the rate table must have a batch dimension (see
            :mod:`~xinfer_ros.core.batch_cost`), else construction fails with one line.
            1 (default): every unit runs alone, the paper's policy.
        batch_hold: with ``max_batch`` above one, whether a relaxed lead may wait for
            mates (:meth:`plan_batch`'s ``start_by``); False runs every formed batch at
            once.
        forecast_batch_guard: an experiment (off by default: it did not raise
            attainment on the engine, docs/BENCHMARKS.md section 5.3): with
            ``max_batch`` above one, a batch's extra duration must also fit in the spare
            time of robots forecast to reach its stage while it runs
            (:meth:`_forecast_guard`); only with ``arrival_aware``, which forecasts
            arrivals.
        defer_batched_units: an experiment (off by default: it lowered attainment past
            saturation on the engine, section 5.3): with ``max_batch`` above one, a
            launched unit does no work in the predictor until its batch starts
            (:meth:`start_batch`); by default it progresses from its launch, so the
            online correction also learns the time units wait for a lane.
        lane_gate: an experiment (off by default: on the engine it lost to both XInfer
            arms at 4-16 robots, docs/BENCHMARKS.md section 5.3): with ``max_batch``
            above one, launch a stage's units only into its free lanes
            (``lanes_for(slots, max_batch)`` of them, a lane being free while no batch
            :meth:`start_batch` recorded on it still runs): at most ``max_batch``
            units per free lane, counting the launched ones still waiting.
            Ready work then waits in the policy's ready queue, ordered afresh at every
            decision, instead of on a lane; a lightly loaded server launches one unit
            per free lane (unbatched XInfer's behaviour) and batches form only when
            more units are ready than lanes are free. False (default): units launch up
            to the stage's slots and wait for a lane.
        ride_along: an experiment (off by default: level with lane batching only at 12
            robots on the engine, section 5.3), with ``lane_gate``: past ViT, while a
            launched unit of the stage waits for its batch to start, ordinary ready
            units of the stage launch without admission's checks, up to the gate's
            limit, and :meth:`plan_batch` decides whether they join (its guard and
            floors price the batch's extra time). The units a batch runs anyway cost
            only that extra time, which admission, pricing each as a unit of its own,
            overstates; ViT units still pass admission, which keeps new work out of
            the pipeline.
        batch_under_pressure: an experiment (off by default: on the engine it held
            the figure of issue 28 at 4, 6 and 12 robots but not at 8, nor 1.5x
            goodput at 12, docs/BENCHMARKS.md section 5.3), with ``lane_gate``: a
            stage batches only while it is under pressure (:meth:`_under_pressure`:
            its backlog served in batches keeps more deadlines than served one unit at
            a time). Otherwise the gate launches at most one unit per free lane,
            slot-aware admission sees that launch limit as the stage's slots, riders
            wait for admission and no lead holds for mates, so a lightly loaded
            server launches as unbatched XInfer on slots of one unit per lane does.
            Units launched that way may still share a batch: a free lane plans every
            waiting unit of its stage, and :meth:`plan_batch` adds mates whose
            deadlines allow it (as measured; lone units only was not tried).
        batch_on_ties: an experiment (off by default: on the engine it batched Action as
            often as lane batching at 12 robots and still fell short of it and of
            unbatched XInfer at 8, docs/BENCHMARKS.md section 5.3), with
            ``batch_under_pressure``: the pressure test errs towards batching. A
            stage is also under pressure when serving its backlog alone misses a
            deadline and batches keep at least as many, so deadlines lost either way
            (most of a saturated server's backlog, but one late unit suffices) no
            longer keep the backlog on one unit at a time.
        fill_under_pressure: an experiment (off by default: on the engine it holds at 4
            robots but is 2.2 points short of lane batching at 8 and 13.4 at 12, its
            units shed while they wait for lanes, docs/BENCHMARKS.md section 5.3), with
            ``batch_under_pressure``: while a stage is under pressure its batches form
            without the guard and the tight members' half-slack floors (``fill`` of
            :func:`~xinfer_ros.core.batch_formation.form_batch`): only no member made
            late. Past saturation ``batch_on_ties`` ran Action batches of 1.45 units on
            average against lane batching's 2.42 (docs/BENCHMARKS.md section 5.3): the
            pressure test said batches keep more deadlines, and formation then cut them.
        slots_under_pressure: an experiment (off by default: it holds past
            saturation and reaches 1.86–1.96x unbatched goodput at 12 robots, but
            trails lane batching at 8 robots, by 4.2 and 6.7 points at a common speed
            in two blocks, docs/BENCHMARKS.md section 5.3), with
            ``fill_under_pressure``: while a stage is under pressure its units launch
            up to the stage's slots, as lane batching's do, not one batch per free lane;
            formation still makes no member late. Riders past ViT then launch without
            admission up to the slots too (8 Action units on slots 4,4,8, not
            ``max_batch`` per free lane). With fill alone, units waited for a
            free lane in the ready queue and were shed there (docs/BENCHMARKS.md
            section 5.3).
        fill_keeps_floors: an experiment (off by default: within 2 points of the
            better XInfer arm at 6, 8 and 12 robots in one slow hour by the medians,
            none of it decided at a common speed; 2 and 4 robots and parcel not
            measured, docs/BENCHMARKS.md section 5.3), with
            ``fill_under_pressure``: filling drops the guard only, and tight members
            keep half of their slack (``keep_floors`` of
            :func:`~xinfer_ros.core.batch_formation.form_batch`). On the engine fill
            batched Action more than lane batching at 8 robots and kept fewer 90 ms
            requests (docs/BENCHMARKS.md section 5.3); a batch that runs longer than
            predicted then still leaves the tight members a margin.
        batch_feedback: an experiment (off by default), with ``max_batch`` above one:
            the engine reports each formed batch's observed forward
            (:meth:`observe_batch`) and :class:`~xinfer_ros.core.batch_cost.BatchCost`
            scales its batch costs by what it learns. On the CPU engine formation
            predicted its batches 1.3-1.45x longer than they ran
            (docs/BENCHMARKS.md section 5.3).
        batch_feedback_by_size: an experiment (off by default), with ``batch_feedback``:
            the batch costs learn one factor per stage and batch size
            (:class:`~xinfer_ros.core.batch_cost.BatchCost` ``by_size``), not one per
            stage: under one per stage the formed batches still ran 0.72-1.13x their
            predictions across sizes, by size 0.96-1.12x.
        contest_late: an experiment (off by default), with ``max_batch`` above one: a
            unit predicted late alone by less than the predictor's own error is still
            served as if it could make its deadline (:meth:`_contest`): formation keeps
            all of its slack, so it runs alone, and the pressure test counts it as kept.
            Without it such a unit is given up: it joins any batch (which makes it late
            for sure), and with ``batch_on_ties`` its loss alone is enough to put the
            stage under pressure. On the CPU engine the forming policies kept 5–22 % of
            the 90 ms class at 6 robots where unbatched XInfer kept 25–37 %, while the
            predicted ends of Action units were off by 10–30 ms on average. With it
            (and ``batch_feedback_by_size``) fed gained 5 points at phases 8 but not at
            parcel 12 on a fast host, still short of lane batching at both
            (docs/BENCHMARKS.md section 5.3).
        error_margin: an experiment (off by default), with ``max_batch`` above one:
            every batch member that can make its deadline keeps the predictor's
            typical error on its remaining time (:meth:`_predictor_error`) as slack, or
            all of its slack when it has less (``margin`` of
            :func:`~xinfer_ros.core.batch_formation.form_batch`). Without it a relaxed
            member's floor is 0: on the CPU engine at phases 8, 46 % of the late 90 ms
            requests under ``xinfer_batch_contest`` had run their Action in a batch
            (53 ms against 40 ms alone under unbatched XInfer). With it that preset
            was within of the better arm at phases 4 and 8 in slower hours, short at
            6 by the medians, and 9-17 points short past saturation (12 robots, parcel
            10 in the slowest hour; docs/BENCHMARKS.md section 5.3).
        saturation_switch: with ``max_batch`` above one: serve as unbatched XInfer
            while unbatched serving keeps up with the offered load, and as lane batching
            once it cannot (:class:`~xinfer_ros.core.saturation.SaturationMeter`:
            arrivals per second times each stage's unit time alone, over its lanes,
            against a band around 0.9). Unsaturated, at most one unit per lane is
            launched (running or waiting) and admission sees those as the slots, so no
            unit waits for a lane; saturated, units launch up to the slots with admission
            on the slots, and the lanes batch up to ``max_batch`` of their oldest
            waiting units, as lane batching does. The policy forms no batch
            (:func:`batch_former` is None): the engine reports every unit's forward
            (:meth:`observe_forward`) for the meter. On the CPU engine's paired blocks
            the two arms crossed where unbatched Action lanes were about 0.9 busy
            (docs/BENCHMARKS.md section 5.3). Excludes ``lane_gate`` and the formation
            settings.
        saturation: the meter's window and band (default
            :class:`~xinfer_ros.core.saturation.SaturationSettings`), with
            ``saturation_switch``.
        tight_alone: with ``saturation_switch``, saturated: a unit whose request is
            tight (on time if its remaining units run alone, late if they run in full
            batches, at the unit times the meter measured and the table's batch
            factors) launches ahead of the stage's other units, in a forward of at most
            the largest batch size that keeps it on time (:attr:`Launch.batch_limit`;
            1: alone) and of tight units only; the others batch as the lanes take
            them. Why: lane batching takes each lane's oldest units, so a 90 ms
            request waited behind 400 ms ones and ran in their batch. The measured
            forwards judge it, not the predictor, whose online correction, saturated,
            also learns the time units wait for a lane. Ordinary units wait while
            tight ones keep coming (by design). Off by default: on the CPU engine it
            was below the plain switch at phases 12 (docs/BENCHMARKS.md section 5.3,
            "Tight requests ahead and alone once saturated").
        lazy_slots: our extension for devices where concurrent units slow each other
            down more than they gain (a CPU), one of :data:`LAZY_SLOTS`. ``"stage"``:
            an ordinary unit only takes a stage's slot while no other unit of that
            stage runs; ``"device"``: only while no unit runs at all, so a lightly
            loaded server runs one request at a time, as a plain serial server does.
            Protected units, whose slack cannot wait for the running ones, take any
            free slot: the spare slots buy parallelism only when waiting would cost a
            deadline. ``"off"`` (default): the paper's policy, ordinary units take any
            free slot that admission allows.
        record_admissions: keep an :class:`AdmissionRecord` per ordinary admission in
            ``admissions`` (for tests and diagnostics; off on the hot path), the latest
            :data:`MAX_ADMISSION_RECORDS` only: a long-running server must not grow.
        **kwargs: see :class:`~xinfer_ros.core.policy.Policy` (slots, rate_table, ...).
    """

    name = "xinfer"
    time_dependent = True

    def __init__(
        self,
        *,
        interference: bool = True,
        strict_priority: bool = False,
        arrival_aware: bool = True,
        entry_only: bool = False,
        zero_slack_promotion: bool = False,
        slot_aware: bool = True,
        arrival_projection: bool = False,
        forecast_load: bool = False,
        phase_budget: float | None = None,
        frontend_reserve: float = FRONTEND_RESERVE,
        delta: float = DELTA,
        lazy_slots: str = "off",
        record_admissions: bool = False,
        max_batch: int = 1,
        batch_hold: bool = True,
        forecast_batch_guard: bool = False,
        defer_batched_units: bool = False,
        lane_gate: bool = False,
        ride_along: bool = False,
        batch_under_pressure: bool = False,
        batch_on_ties: bool = False,
        fill_under_pressure: bool = False,
        slots_under_pressure: bool = False,
        fill_keeps_floors: bool = False,
        batch_feedback: bool = False,
        batch_feedback_by_size: bool = False,
        contest_late: bool = False,
        error_margin: bool = False,
        saturation_switch: bool = False,
        saturation: SaturationSettings | None = None,
        tight_alone: bool = False,
        **kwargs: Unpack[PolicyOptions],
    ) -> None:
        super().__init__(interference=interference, **kwargs)
        #: Batch costs d_s(k, n) for :meth:`plan_batch`; None: units run alone.
        self.batch_cost: BatchCost | None = None
        if max_batch != 1:
            table = kwargs.get("rate_table") or default_rate_table()
            self.batch_cost = BatchCost(self.predictor, max_batch, "rate table", table,
                                        by_size=bool(batch_feedback_by_size))
        self.batch_hold = bool(batch_hold)
        self.forecast_batch_guard = bool(forecast_batch_guard)
        self.defer_batched_units = bool(defer_batched_units)
        self.lane_gate = bool(lane_gate)
        self.ride_along = bool(ride_along)
        self.batch_under_pressure = bool(batch_under_pressure)
        self.batch_on_ties = bool(batch_on_ties)
        self.fill_under_pressure = bool(fill_under_pressure)
        self.slots_under_pressure = bool(slots_under_pressure)
        self.fill_keeps_floors = bool(fill_keeps_floors)
        self.batch_feedback = bool(batch_feedback)
        self.contest_late = bool(contest_late)
        self.error_margin = bool(error_margin)
        self._check_batch_flags(bool(batch_feedback_by_size), bool(saturation_switch),
                                saturation, bool(tight_alone))
        #: With the lane gate: request id -> (stage, batch number) of each unit whose
        #: formed batch started (start_batch); stale entries are pruned when read.
        self._started: dict[int, tuple[int, int]] = {}
        #: Launch as unbatched XInfer or as lane batching by the meter's verdict.
        self.saturation_switch = bool(saturation_switch)
        #: With saturation_switch: whether unbatched serving keeps up.
        self._meter: SaturationMeter | None = None
        if self.saturation_switch:
            self._meter = SaturationMeter(self._lanes(), self._unit_alone, saturation)
        self._set_tight_alone(bool(tight_alone))
        #: Slots slot-aware admission sees per stage: the stage's slots, or with
        #: ``batch_under_pressure`` and no pressure, the gate's one unit per lane (with
        #: ``saturation_switch`` unsaturated, the stage's lanes).
        self._admit_slots: list[int] = list(self.slots)
        self._batches_started = 0
        self.strict_priority = bool(strict_priority)
        self.arrival_aware = bool(arrival_aware)
        self.entry_only = bool(entry_only)
        self.zero_slack_promotion = bool(zero_slack_promotion)
        self.slot_aware = bool(slot_aware)
        self.arrival_projection = bool(arrival_projection)
        self.forecast_load = bool(forecast_load)
        self.lazy_slots = check_lazy_slots(lazy_slots)
        #: Per-decision cache of protected remaining times by load index (see
        #: _protected_remaining); cleared at every decision start and launch.
        self._rem_cache: dict[int, list[tuple[float, float, int]]] = {}
        self.phase_budget = (None if phase_budget is None
                             else check_time("phase_budget", phase_budget, positive=True))
        self.frontend_reserve = check_time("frontend_reserve", frontend_reserve)
        self.delta = check_time("delta", delta)
        self.record_admissions = bool(record_admissions)
        self.admissions: deque[AdmissionRecord] = deque(maxlen=MAX_ADMISSION_RECORDS)
        #: P: promoted requests (persistent while live).
        self._promoted: set[int] = set()
        #: H after the latest refresh.
        self._protected: set[int] = set()
        self._nf: tuple[int, int, int] = (0, 0, 0)
        #: Predictor.index(_nf), set with it by _refresh (lookups at n_f reuse it).
        self._nf_index = self.predictor.index(self._nf)
        #: L ∩ P: promoted ids with ℓ_j − t < R_j(0), valid during one decision at _late_t.
        self._late_set_cache: set[int] = set()
        self._late_t = float("nan")
        #: Evaluations of the promotion loop in the latest refresh (Alg. 2 lines 3–9),
        #: and |P0| at its start: the termination bound is |J| − |P0| + 1.
        self.last_refresh_iterations = 0
        self.last_refresh_p0 = 0

    def _check_batch_flags(self, batch_feedback_by_size: bool, saturation_switch: bool,
                           saturation: SaturationSettings | None, tight_alone: bool) -> None:
        """Refuse batch settings that need another one, or exclude each other (one line).

        Raises:
            ValueError: naming the setting and what it needs.
        """
        for wrong, why in ((bool(batch_feedback_by_size) and not self.batch_feedback,
                            "batch_feedback_by_size needs batch_feedback"),
                           (self.batch_feedback and self.batch_cost is None,
                            "batch_feedback needs max_batch above one: units run alone"),
                           (self.contest_late and self.batch_cost is None,
                            "contest_late needs max_batch above one: units run alone"),
                           (self.error_margin and self.batch_cost is None,
                            "error_margin needs max_batch above one: units run alone"),
                           (saturation_switch and self.batch_cost is None,
                            "saturation_switch needs max_batch above one: units run alone"),
                           (saturation_switch and (self.lane_gate or self.batch_feedback
                                                   or self.contest_late or self.error_margin
                                                   or self.defer_batched_units
                                                   or self.forecast_batch_guard),
                            "saturation_switch leaves batches to the lanes: it excludes "
                            "lane_gate and the formation settings (batch_feedback, "
                            "contest_late, error_margin, defer_batched_units, "
                            "forecast_batch_guard)"),
                           (saturation is not None and not saturation_switch,
                            "saturation settings need saturation_switch"),
                           (tight_alone and not saturation_switch,
                            "tight_alone needs saturation_switch: only a saturated switch "
                            "lets its lanes batch"),
                           (self.fill_keeps_floors and not self.fill_under_pressure,
                            "fill_keeps_floors needs fill_under_pressure: "
                            "without filling the floors are always kept"),
                           (self.slots_under_pressure and not self.fill_under_pressure,
                            "slots_under_pressure needs fill_under_pressure: "
                            "without it, it would do nothing")):
            if wrong:
                raise ValueError(why)
        for flag, on in (("ride_along", self.ride_along),
                         ("batch_under_pressure", self.batch_under_pressure)):
            if on and not self.lane_gate:
                raise ValueError(f"{flag} needs lane_gate: without it, it would do nothing")
        for flag, on in (("batch_on_ties", self.batch_on_ties),
                         ("fill_under_pressure", self.fill_under_pressure)):
            if on and not self.batch_under_pressure:
                raise ValueError(f"{flag} needs batch_under_pressure: "
                                 "without it, it would do nothing")

    def add_request(self, request: Request, t: float) -> None:
        """Register an arrival (see :meth:`Policy.add_request`), under ``phase_budget``."""
        cap = self.phase_budget
        if cap is not None and request.budget > cap:
            request.budget = cap
            request.deadline = deadline(request.arrival, cap, request.delta)
        super().add_request(request, t)
        if self._meter is not None:
            self._meter.arrive(t)

    def observe_forward(self, stage: Stage | int, duration: float, batch: int, t: float) -> None:
        """A unit of ``stage`` ran ``duration`` s in a forward of ``batch`` units, ending at ``t``.

        With ``saturation_switch`` its meter counts the time the unit would have run
        alone, ``duration`` over the table's batch factor f_s(``batch``); otherwise a
        no-op. Every member of a batch reports it, so a forward weighs its units.
        """
        if self._meter is not None and batch >= 1:
            s = int(stage)
            self._meter.observe(s, duration / self._batch_factor(s, batch), t=t)

    def at_own_limit(self, stage: Stage | int) -> bool:
        """Unsaturated ``saturation_switch`` with a unit on every lane of ``stage``.

        See :meth:`Policy.at_own_limit`. Ticks there gave the engine's dispatcher 35 %
        more decisions than unbatched XInfer's at phases 6 (block2 of 2026-12-06),
        none of which could launch.
        """
        meter = self._meter
        return (meter is not None and not meter.verdict
                and self.tracker.counts[stage] >= meter.lanes[stage])

    def spreads_lanes(self) -> bool:
        """Unsaturated ``saturation_switch``: a unit per lane (see :meth:`Policy.spreads_lanes`).

        Its launch limit is the lanes, so every launched unit finds a lane of its own,
        as under unbatched XInfer; without spreading, two units launched together ran
        as one forward while the other lane idled.
        """
        return self._meter is not None and not self._meter.verdict

    def set_slots(self, slots: SlotCounts) -> None:
        """Change the slots (see :meth:`Policy.set_slots`); the switch's lanes follow."""
        super().set_slots(slots)
        if self._meter is not None:
            self._meter.lanes = self._lanes()

    def pin_saturation(self, verdict: bool | None) -> None:
        """Serve ``saturation_switch`` pinned saturated (True) or not (False), or as read.

        The pin holds from the next decision on, whatever the meter reads; None hands
        the verdict back to the meter. Any thread may call it: the next decision takes
        it whole. The meter goes on measuring beneath a pin, so its summary still says
        what it read.

        Raises:
            ValueError: the policy has no ``saturation_switch``.
        """
        if self._meter is None:
            raise ValueError(f"{self.name}: only a saturation_switch has a verdict to pin")
        self._meter.pin = verdict

    @property
    def saturation(self) -> SaturationSummary | None:
        """What ``saturation_switch``'s meter read and decided; None without it."""
        return self._meter.summary() if self._meter is not None else None

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
        if n is None:  # the refresh looked up n_f's table index already
            return r.deadline - t - self.tracker.remaining_at(r, t, self._nf_index)
        return r.deadline - t - self.tracker.remaining(r, t, n)

    def blocking_term(self, request_id: int, t: float,
                      n: tuple[int, int, int] | None = None) -> float:
        """B_j: the largest predicted residual of another request's running ordinary unit."""
        if self.zero_slack_promotion:
            return 0.0
        n = self._nf if n is None else n
        tr = self.tracker
        return max((tr.residual(u, t, n) for rid, u in tr.units.items()
                    if rid != request_id and rid not in self._protected), default=0.0)

    # -- batch formation (issue 28) ------------------------------------------------------------
    def plan_batch(self, stage: Stage | int, request_ids: Sequence[int], t: float) -> BatchPlan:
        """Which launched units of ``stage`` a free lane runs now as one batch.

        The lane asks instead of taking the oldest unit and any mates: see
        :func:`~xinfer_ros.core.batch_formation.form_batch`. Batch costs come from the
        table's batch dimension at the load of the *other* running units; a member's
        rest is its remaining stages at that load; the guard is the smallest slack of a
        protected request outside the candidates that is not already predicted late
        (with ``forecast_batch_guard``, also the smallest spare time of a robot forecast
        to reach the stage while a batch may run: :meth:`_forecast_guard`).
        The lead holds for mates only while one is due within the hold: past ViT,
        another live request must be ready for ``stage`` or running the stage before it
        with a predicted residual that ends before ``start_by`` (ViT mates are
        arrivals, which may always come). Holding for mates not due cost 4 to 7 points
        of attainment above the ERC in the simulator (docs/BENCHMARKS.md section 5.3).
        With ``batch_under_pressure`` the lead holds only while ``stage`` is under
        pressure (:meth:`_under_pressure`); with ``fill_under_pressure`` the batch then
        also forms without guard and half-slack floors.

        Args:
            stage: the lane's stage.
            request_ids: launched, not yet running units of ``stage`` with one batch
                key, oldest first.
            t: decision time.

        Raises:
            SchedulerStateError: an id that is not a live request at ``stage``.
        """
        s = int(stage)
        reqs = self._requests
        deadlines: list[float] = []
        for rid in request_ids:
            r = reqs.get(rid)
            if r is None or r.cursor != s:
                raise SchedulerStateError(f"request {rid} has no launched {Stage(s).name} unit")
            deadlines.append(r.deadline)
        if not request_ids:
            raise SchedulerStateError("plan_batch needs at least one launched unit")
        pred, counts = self.predictor, self.tracker.counts
        waiting = len(request_ids)
        others = (counts[0] - waiting * (s == 0), counts[1] - waiting * (s == 1),
                  counts[2] - waiting * (s == 2))
        cost = self.batch_cost
        durations = (cost.durations(s, others) if cost is not None
                     else (pred.q_tab[pred.index(others)][s],))
        others_index = pred.index(others)
        rest = pred.suffix_tab[others_index][s + 1]
        members = set(request_ids)
        may_wait = cost is not None and self.batch_hold
        fill = False
        if ((may_wait or self.fill_under_pressure) and self._gates()
                and self.batch_under_pressure):
            pressed = self._under_pressure(s, t)
            may_wait = may_wait and pressed
            fill = pressed and self.fill_under_pressure
        # A filling batch has no guard (form_batch_of drops it): spare the scan of every
        # protected request on the lane's hot path.
        guard = math.inf
        if not fill:
            guard = self._batch_guard(members, t)
            if cost is not None and self.forecast_batch_guard and self.arrival_aware:
                guard = min(guard, self._forecast_guard(s, t, durations[-1], others_index))
        error = self._predictor_error(s, durations[0], rest)
        plan = form_batch_of(request_ids, deadlines, (rest,) * waiting, t, durations,
                             guard=guard, may_wait=may_wait, fill=fill,
                             keep_floors=self.fill_keeps_floors,
                             contest=error if self.contest_late else 0.0,
                             margin=error if self.error_margin else 0.0)
        if plan.start_by > t and s > 0 and not self._mate_due(s, members, plan.start_by - t, t):
            return BatchPlan(plan.members, plan.duration, t)
        return plan

    def _issue(self, req: Request, stage: Stage, t: float, protected: bool = False) -> Launch:
        limit = self._tight_limit(req, stage, t)
        launch = super()._issue(req, stage, t, protected)
        if self._defers():
            # Its batch starts later (start_batch): until then it does no work.
            self.tracker.defer(req.request_id)
        return replace(launch, batch_limit=limit) if limit else launch

    def _set_tight_alone(self, on: bool) -> None:
        """Set ``tight_alone`` and the tables it reads (before the first decision)."""
        self.tight_alone = on
        top = self.batch_cost.max_batch if self.batch_cost is not None else 1
        #: f_u(k) per stage u and batch size k (index k − 1), as the table states them:
        #: what tight_alone prices batches with, frozen on purpose (read before any
        #: online correction, so a decision does not recompute them).
        self._table_factors = tuple(tuple(self._batch_factor(u, k) for k in range(1, top + 1))
                                    for u in range(3))
        #: Per stage s, read at each saturated decision from the meter's unit times:
        #: the remaining time of a request about to run s if its units run alone, and
        #: per batch size k (index k − 1) what batches of k from s on add to it (zeros
        #: until then).
        self._alone_rest, self._batch_extra = self._rest_alone_and_batched((0.0, 0.0, 0.0))

    def _tight_limit(self, req: Request, stage: Stage, t: float) -> int:
        """``tight_alone``, saturated: the most units ``req``'s ``stage`` unit may batch with.

        0 (it batches as the lanes take it) unless ``req`` makes its deadline if its
        units from ``stage`` on run alone but not if they run in full batches; then the
        largest batch size k that keeps it on time (at least 1). A request late even
        alone batches, so that its unit costs the others the least.
        """
        meter = self._meter
        if not self.tight_alone or meter is None or not meter.verdict:
            return 0
        spare = req.deadline - t - self._alone_rest[stage]
        extra = self._batch_extra
        if spare < 0.0 or spare >= extra[-1][stage]:
            return 0
        k = 1
        while extra[k][stage] <= spare:
            k += 1
        return k

    def _rest_alone_and_batched(self, unit: tuple[float, float, float]
                                ) -> tuple[tuple[float, float, float],
                                           tuple[tuple[float, float, float], ...]]:
        """Remaining times per stage alone, and what batches add, from ``unit``'s times.

        ``unit[s]`` is one stage-s unit's time alone. Per stage s: Σ over stages u ≥ s
        of ``unit[u]``, plus the output stage (the remaining time of a request about to
        run s, alone), and for each batch size k from 1 to
        ``max_batch``, Σ over u ≥ s of ``unit[u]`` · (f_u(k) − 1) (what batches of k add
        to it, at the table's batch factors; 0 for k = 1).
        """
        fv, fp, fa = self._table_factors
        out = self.predictor.h_out
        extra = []
        for k in range(len(fa)):
            e0, e1, e2 = unit[0] * (fv[k] - 1.0), unit[1] * (fp[k] - 1.0), unit[2] * (fa[k] - 1.0)
            extra.append((e0 + e1 + e2, e1 + e2, e2))
        return ((out + unit[0] + unit[1] + unit[2], out + unit[1] + unit[2], out + unit[2]),
                tuple(extra))

    def start_batch(self, stage: Stage | int, request_ids: Sequence[int], t: float) -> None:
        """Record that the launched ``stage`` units of ``request_ids`` start now as one batch.

        With ``max_batch`` above one a launched unit waits, doing no work, until the
        batch :meth:`plan_batch` puts it in starts (a free lane, a hold for mates). With
        ``defer_batched_units`` the tracker counts it as starting at every prediction
        until then (:meth:`~xinfer_ros.core.predictor.ProgressTracker.defer`) and from
        ``t`` on as running (:meth:`~xinfer_ros.core.predictor.ProgressTracker.restart`),
        so that predicted ends and the online correction's observations count the time
        units run, not the time they waited; without it (the default) this only checks
        the ids. The engine's dispatcher and the simulator call it when they hand a
        lane the batch :meth:`plan_batch` formed.

        Raises:
            SchedulerStateError: an id without a running unit of ``stage``.
        """
        t = self._advance_clock(t)
        tracker, s = self.tracker, int(stage)
        for rid in request_ids:  # all checked first: a bad id restarts none of them
            u = tracker.units.get(rid)
            if u is None or u.stage != s:
                raise SchedulerStateError(f"request {rid} has no launched {Stage(s).name} unit")
        if self._defers():
            for rid in request_ids:
                tracker.restart(rid, t)
        if self._gates():
            self._batches_started += 1
            for rid in request_ids:
                self._started[rid] = (s, self._batches_started)

    def observe_batch(self, stage: Stage | int, predicted: float, observed: float,
                      size: int = 1) -> None:
        """A batch of ``size`` :meth:`plan_batch` formed ran ``observed`` s against ``predicted``.

        With ``batch_feedback`` its batch costs learn from it
        (:meth:`~xinfer_ros.core.batch_cost.BatchCost.observe`); otherwise a no-op.
        """
        if self.batch_feedback and self.batch_cost is not None:
            self.batch_cost.observe(int(stage), predicted, observed, size)

    def _batch_factor(self, s: int, k: int) -> float:
        """f_s(k): a stage-``s`` batch of ``k`` alone over one unit alone (the table's)."""
        cost = self.batch_cost
        if cost is None or k <= 1:
            return 1.0
        d = cost.durations(s, (0, 0, 0))
        return d[min(k, len(d)) - 1] / d[0]

    def _lanes(self) -> tuple[int, int, int]:
        """Lanes per stage: the slots in batches of up to ``max_batch`` (1 without)."""
        cost = self.batch_cost
        n = cost.max_batch if cost is not None else 1
        return (lanes_for(self.slots[0], n), lanes_for(self.slots[1], n),
                lanes_for(self.slots[2], n))

    def _unit_alone(self, s: int) -> float:
        """The predictor's time for one stage-``s`` unit while the stage's other lanes run.

        The saturation meter's reading for a stage with no recent forward.
        """
        pred = self.predictor
        others = tuple((self._lanes()[s] - 1) * (i == s) for i in range(3))
        return pred.q_tab[pred.index(others)][s]

    def _gates(self) -> bool:
        """Whether units launch only into free lanes (``lane_gate`` with batches)."""
        return self.lane_gate and self.batch_cost is not None

    def _launch_limit(self, s: int, lane_use: tuple[int, int] | None = None, *,
                      pressed: bool = True) -> int:
        """Most stage-``s`` units that may be launched (running or waiting) at once.

        The stage's slots; with the lane gate, also the units already on a lane plus
        ``max_batch`` for each lane with no started batch (its waiting units count),
        or one per such lane when ``pressed`` is False (``batch_under_pressure`` and
        the stage not under pressure). ``lane_use``: :meth:`_lane_use` of ``s`` when the
        caller has it already.
        """
        slots = self.slots[s]
        cost = self.batch_cost
        if not self.lane_gate or cost is None:
            return slots
        on_lanes, batches = self._lane_use(s) if lane_use is None else lane_use
        free = max(0, lanes_for(slots, cost.max_batch) - batches)
        return min(slots, on_lanes + (cost.max_batch if pressed else 1) * free)

    def _under_pressure(self, s: int, t: float) -> bool:
        """Whether stage ``s`` needs batches: batching its backlog keeps more deadlines.

        The backlog, the stage's ready units and its launched units not yet on a lane,
        is served in deadline order on the stage's lanes twice: one unit at a time,
        each taking d_s(1), and in batches of ``max_batch`` consecutive units (the
        last may be smaller) taking d_s(k). A lane starts when predicted free (a busy
        lane when its batch's longest predicted residual ends); durations are at n_f
        with the stage's own count replaced by its units on lanes; each unit then runs
        its remaining stages. The stage is under pressure when the batched service
        finishes more units in time (with ``batch_on_ties``, also when it finishes as
        many and serving alone misses one). Upstream units do not count: waiting for them
        made batches look worse than serving alone in the simulator. Batches a
        dispatcher has formed but not yet started (:meth:`start_batch` comes after
        it has planned every free lane) still count as backlog on idle lanes, which
        understates pressure for the lanes planned after the first in one pass.
        """
        cost = self.batch_cost
        if cost is None:
            return False
        tracker, pred, reqs = self.tracker, self.predictor, self._requests
        units, started, n = tracker.units, self._started, self._nf
        busy: dict[int, float] = {}
        backlog = [r.deadline for r in self._ready[s].values()]
        running = 0
        for rid, u in units.items():
            if u.stage != s:
                continue
            on = started.get(rid)
            if on is not None and on[0] == s:
                running += 1
                end = t + tracker.residual(u, t, n)
                busy[on[1]] = max(busy.get(on[1], t), end)
            else:
                backlog.append(reqs[rid].deadline)
        lanes = lanes_for(self.slots[s], cost.max_batch)
        idle = max(0, lanes - len(busy))
        if len(backlog) <= idle:
            return False  # a free lane for every unit: none waits
        backlog.sort()
        others = (running if s == 0 else n[0], running if s == 1 else n[1],
                  running if s == 2 else n[2])
        durations = cost.durations(s, others)
        rest = pred.suffix_tab[pred.index(others)][s + 1]
        lane_free = [t] * idle + list(busy.values())
        # A unit late by less than the predictor's error counts as kept (contest_late).
        rest_kept = rest - self._contest(s, durations[0], rest)
        batched = _on_time(backlog, lane_free, durations, rest_kept, len(durations))
        alone = _on_time(backlog, lane_free, durations, rest_kept, 1)
        return _pressed(batched, alone, len(backlog), ties=self.batch_on_ties)

    def _contest(self, s: int, duration: float, rest: float) -> float:
        """How late alone (s) a stage-``s`` unit may be predicted and still be contested.

        :meth:`_predictor_error` with ``contest_late``, else 0.
        """
        return self._predictor_error(s, duration, rest) if self.contest_late else 0.0

    def _predictor_error(self, s: int, duration: float, rest: float) -> float:
        """The predictor's typical error (s) on a stage-``s`` unit's remaining time.

        Its ``duration`` at ``s`` and the ``rest`` after it, each times the relative
        error per unit the online rate correction has seen
        (:attr:`~xinfer_ros.core.rate_correction.RateCorrection.dispersion`; for the
        rest the largest of the later stages'). 0 without a correction (the
        simulator's exact rates).
        """
        corr = self.predictor.correction
        if corr is None:
            return 0.0
        disp = corr.dispersion
        return duration * disp[s] + rest * max(disp[s + 1:], default=0.0)

    def _lane_use(self, s: int) -> tuple[int, int]:
        """Stage-``s`` units in started batches, and how many batches (lane gate)."""
        units, started = self.tracker.units, self._started
        on_lanes = 0
        batches: set[int] = set()
        for rid, (st, batch) in list(started.items()):
            u = units.get(rid)
            if u is None or u.stage != st:
                del started[rid]  # finished (or moved on): its lane no longer holds it
            elif st == s:
                on_lanes += 1
                batches.add(batch)
        return on_lanes, len(batches)

    def _defers(self) -> bool:
        """Whether launched units wait without work until their batch starts."""
        return self.defer_batched_units and self.batch_cost is not None

    def _batch_guard(self, members: set[int], t: float) -> float:
        """Smallest slack σ_h(n_f) >= 0 of a protected request outside ``members``.

        Protected requests already predicted late cannot be saved by a smaller batch, so
        they do not count; infinity when none is left.
        """
        guard = float("inf")
        for rid in self._protected:
            if rid in members:
                continue
            sl = self.slack(rid, t)
            if 0.0 <= sl < guard:
                guard = sl
        return guard

    def _forecast_guard(self, s: int, t: float, longest: float, others_index: int) -> float:
        """Smallest spare time >= 0 of a forecast arrival reaching stage ``s`` in a batch.

        The guard of :meth:`_batch_guard` for requests that have not arrived yet, as
        FORECASTFEASIBLE protects them at admission: a robot due to send during the
        longest batch (``longest``, d_s(N)) reaches stage ``s`` at ``a_e + f`` plus the
        stages before ``s`` and may find the lane still busy, so the batch's extra time
        must fit in its spare ``b_e − δ − f − R_V(n')`` (n': the other running units and
        its own ViT unit). Forecasts predicted late even so constrain nobody; infinity
        when no forecast is due.
        """
        pred = self.predictor
        suf = pred.suffix_tab[pred.plus[others_index][0]]
        reserve = self.delta + self.frontend_reserve
        # a_e + f + (suf_V − suf_s) <= t + longest: e reaches stage s while a batch may run.
        ahead = self.frontend_reserve + suf[0] - suf[s]
        guard = float("inf")
        for _, _, b in self.forecaster.between(t - ahead, t + longest - ahead, self.delta):
            spare = b - reserve - suf[0]
            if 0.0 <= spare < guard:
                guard = spare
        return guard

    def _mate_due(self, s: int, waiting: set[int], within: float, t: float) -> bool:
        """Whether a request outside ``waiting`` may launch a stage-``s`` unit ``within``.

        One ready for ``s``, or one running ``s − 1`` predicted to finish in time.
        """
        ready, units, tracker, n = self._ready[s], self.tracker.units, self.tracker, self._nf
        for rid in self._requests:
            if rid in waiting:
                continue
            if rid in ready:
                return True
            u = units.get(rid)
            if u is not None and u.stage == s - 1 and tracker.residual(u, t, n) <= within:
                return True
        return False

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

    # Inlined on purpose: runs on every scheduling decision; a split costs µs (docs/BENCHMARKS.md).
    def _refresh(  # noqa: PLR0912, PLR0915
        self, t: float, units: dict[int, tuple[float, float, int]]
    ) -> tuple[set[int], tuple[int, int, int]]:
        """Algorithm 2 at ``t``; ``units`` is the tracker's snapshot at ``t``."""
        reqs = self._requests
        pred = self.predictor
        suffix_tab, inv_own, index = pred.suffix_tab, pred.inv_own, pred.index
        counts = self.tracker.counts
        # Unsaturated, the switch launches a unit per lane: only that much protected
        # ready work can join the load, as on unbatched XInfer's slots. The verdict is
        # the decision's (read in _dispatch): refresh_priority reads no new one.
        meter = self._meter
        slots = self.slots if meter is None or meter.verdict else meter.lanes
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
        self._nf_index = i
        return protected, nf

    # -- Algorithm 1 -----------------------------------------------------------------------------
    def _protected_remaining(self, protected: set[int], t: float, plus_index: int,
                             units: dict[int, tuple[float, float, int]]
                             ) -> list[tuple[float, float, int]]:
        """``(R_h(n), ℓ_h − t − R_h(n), next stage h needs)`` per h ∈ H at flat index n.

        Cached within one decision until the next launch (which changes the running
        units and H): CURRENTFEASIBLE, the slot-aware check and the forecast-load
        check of every candidate at the same load share one evaluation.
        """
        cache = self._rem_cache
        out = cache.get(plus_index)
        if out is not None:
            return out
        reqs = self._requests
        suf = self.predictor.suffix_tab[plus_index]
        inv = self.predictor.inv_own[plus_index]
        out = []
        for rid in protected:
            r = reqs[rid]
            u = units.get(rid)
            if u is None:
                rem = suf[r.cursor]
                nxt = r.cursor
            else:
                s = u[2]
                rem = u[0] + u[1] * inv[s] + suf[s + 1]
                nxt = s + 1
            out.append((rem, r.deadline - t - rem, nxt))
        cache[plus_index] = out
        return out

    def _current_feasible(self, protected: set[int], t: float, plus_index: int,
                          units: dict[int, tuple[float, float, int]]) -> bool:
        # Δ_h(u) ≤ σ_h(n_f)  ⟺  R_h(n+) ≤ ℓ_h − t: the same inequality with R_h(n_f)
        # cancelled, which saves one prediction per protected request.
        for _, spare, _ in self._protected_remaining(protected, t, plus_index, units):
            if not spare >= 0.0:  # not `<`: a NaN spare fails, as all(spare >= 0) did
                return False
        return True

    def _forecasts(self, t: float, stage: int, nf_index: int) -> list[tuple[float, float]]:
        """Forecasts during a stage-``stage`` unit's estimated execution.

        Returns ``(forecast deadline ℓ_e, budget b_e)`` pairs in arrival order.
        """
        pred = self.predictor
        # u's estimated execution: its stage time at the others' load n_f.
        end = t + pred.q_tab[nf_index][stage]
        fc = self.forecaster.between(t, end, self.delta)
        if len(fc) > 1:
            fc.sort()
        return [(ell, b) for _, ell, b in fc]

    def _project_loads(self, t: float, s: int, nf: tuple[int, int, int], *,
                       units: dict[int, tuple[float, float, int]], protected: set[int],
                       forecasts: list[tuple[float, float]]) -> list[tuple[int, int, int]]:
        """Per forecast, the load at its arrival at ViT (a_e + f), candidate included.

        Every request in the pipeline — running a unit, or protected and ready — is
        advanced through its remaining stages at the stage times of load n_f (the
        running stage by its Eq. 9 residual); at offset d it counts in the stage it is
        then predicted to run, and not at all once predicted done. The candidate
        starts stage ``s`` now and advances the same way.
        """
        pred = self.predictor
        i = pred.index(nf)
        q, own = pred.q_tab[i], pred.inv_own[i]
        # Stage end offsets (relative to t) of each pipeline request's remaining stages.
        paths: list[tuple[int, list[float]]] = []
        for wait, left, st in units.values():
            end = wait + left * own[st]
            ends = [end]
            for k in range(st + 1, 3):
                end += q[k]
                ends.append(end)
            paths.append((st, ends))
        reqs, ready = self._requests, self._ready
        for rid in protected:
            c = reqs[rid].cursor
            if rid in ready[c]:
                end = 0.0
                ends = []
                for k in range(c, 3):
                    end += q[k]
                    ends.append(end)
                paths.append((c, ends))
        end = q[s]
        ends = [end]
        for k in range(s + 1, 3):
            end += q[k]
            ends.append(end)
        paths.append((s, ends))
        reserve = self.delta + self.frontend_reserve
        out: list[tuple[int, int, int]] = []
        for ell_e, b in forecasts:
            d = ell_e - b + reserve - t  # a_e + f − t
            n = [0, 0, 0]
            for first, ends in paths:
                for k, e in enumerate(ends):
                    if e > d:
                        n[first + k] += 1
                        break
            out.append((n[0], n[1], n[2]))
        return out

    def _forecast_feasible(self, req: Request, forecasts: list[tuple[float, float]],
                           n_plus: tuple[int, int, int], *,
                           slot_ctx: _SlotContext | None = None, t: float = 0.0,
                           projected: list[tuple[int, int, int]] | None = None) -> bool:
        ell_u = req.deadline
        pred = self.predictor
        suffix_tab, index, plus_tab = pred.suffix_tab, pred.index, pred.plus
        reserve = self.delta + self.frontend_reserve
        nv, np_, na = n_plus
        i = -1  # index((nv, np_, na)), looked up at the first retained forecast
        extra = 0
        demands: list[tuple[float, float]] | None = [] if slot_ctx is not None else None
        for j, (ell_e, b) in enumerate(forecasts):
            if ell_e >= ell_u:
                continue  # only forecasts with earlier deadlines are protected
            # R_V(n'_e): the whole pipeline from ViT at the candidate's load plus the
            # earlier retained forecasts' ViT units.
            if projected is not None:
                pv, pp, pa = projected[j]
                suf = suffix_tab[index((pv + extra, pp, pa))]
                extra += 1
            else:
                if i < 0:
                    i = index((nv, np_, na))
                suf = suffix_tab[i]
            spare = b - reserve - suf[0]
            if spare < 0.0:
                return False
            if demands is not None:
                # Slot-aware: e reaches the candidate's stage s at a_e + f + (time through
                # the stages before s), a_e = ℓ_e − b + δ, and may then wait for a slot.
                s = slot_ctx.stage  # type: ignore[union-attr]
                demands.append((ell_e - b + reserve - t + suf[0] - suf[s], spare))
            nv += 1
            if i >= 0:
                # index((nv, np_, na)) one ViT unit up, from the table (n+ is never
                # negative, where stepping and clipping would differ).
                i = plus_tab[i][0]
        if demands:
            return slot_ctx.feasible(demands)  # type: ignore[union-attr]
        return True

    def _slot_context(self, protected: set[int], t: float, s: int, plus_index: int, *,
                      nf: tuple[int, int, int],
                      units: dict[int, tuple[float, float, int]]) -> _SlotContext:
        """Stage-``s`` slot state once an ordinary stage-``s`` unit is admitted at ``t``.

        Slot free times (relative to ``t``): 0 for each slot still free after the
        admission, the predicted residual at n+ of every running stage-``s`` unit, and
        q_s(n_f) for the admitted unit itself. Demands: every protected request that
        still has to run stage ``s`` (ready at or before ``s``, or running an earlier
        stage) reaches ``s`` at ``R_h(n+) − suffix_s(n+)`` with spare time
        ``ℓ_h − t − R_h(n+)``; a slot wait above the spare makes it miss.
        """
        pred = self.predictor
        suf = pred.suffix_tab[plus_index]

        def make_times() -> list[float]:
            inv_s = pred.inv_own[plus_index][s]
            free_after = self._admit_slots[s] - self.tracker.counts[s] - 1
            times = [0.0] * free_after if free_after > 0 else []
            for wait, left, st in units.values():
                if st == s:
                    times.append(wait + left * inv_s)
            times.append(pred.q_tab[pred.index(nf)][s])
            return times

        suf_s = suf[s]
        demands = [(rem - suf_s, spare) for rem, spare, nxt in
                   self._protected_remaining(protected, t, plus_index, units) if nxt <= s]
        return _SlotContext(s, make_times, pred.q_tab[plus_index][s], demands)

    def _dispatch(self, t: float) -> list[Launch]:
        """Algorithm 1: launch ready units stage by stage, Action first.

        Within a stage, protected requests go first (by deadline), then ordinary ones
        that :meth:`_admits` lets through; each launch refreshes H and n_f.
        """
        launches: list[Launch] = []
        if self.arrival_aware:
            self.forecaster.prune(t)
        # This decision's verdict, before Algorithm 2 uses it.
        if self._meter is not None and self._meter.saturated(t) and self.tight_alone:
            self._alone_rest, self._batch_extra = self._rest_alone_and_batched(
                self._meter.unit_times(t))
        # Events recorded since the last decision may have changed R_j(0): re-evaluate L.
        self._late_t = float("nan")
        units = self.tracker.snapshot(t)
        protected, nf = self._refresh(t, units)
        self._rem_cache.clear()
        for s in (Stage.ACTION, Stage.PREFILL, Stage.VIT):
            protected, nf = self._dispatch_stage(s, t, units, protected=protected, nf=nf,
                                                 launches=launches)
        return launches

    def _stage_limit(self, s: int, t: float,
                     lane_use: tuple[int, int] | None) -> tuple[int, bool]:
        """Stage ``s``'s launch limit now, and whether it counts as under pressure.

        With ``saturation_switch``, under pressure means saturated: the limit is then the
        slots, else the stage's lanes. ``lane_use``: :meth:`_lane_use` of ``s`` with the
        lane gate, else None.
        """
        gates = lane_use is not None
        if self._meter is not None:
            # One verdict for every stage, the busiest stage's, read once per decision
            # (_dispatch). Unsaturated, a unit per lane: none waits for a lane, as under
            # unbatched XInfer on those slots.
            saturated = self._meter.verdict
            return (self.slots[s] if saturated else self._meter.lanes[s]), saturated
        if self.slots_under_pressure and gates:
            # Under pressure, launch as lane batching does (formation still checks every
            # member); the test runs whenever a unit could launch, since it may raise
            # the limit.
            if self.tracker.counts[s] >= self.slots[s]:
                return self.slots[s], True
            pressed = self._under_pressure(s, t)
            return (self.slots[s] if pressed
                    else self._launch_limit(s, lane_use, pressed=False)), pressed
        limit = self._launch_limit(s, lane_use)
        # The pressure test only lowers the limit: skip it when nothing may launch.
        pressed = (self.tracker.counts[s] >= limit
                   or not (gates and self.batch_under_pressure)
                   or self._under_pressure(s, t))
        if not pressed:
            limit = self._launch_limit(s, lane_use, pressed=False)
        return limit, pressed

    def _dispatch_stage(self, s: Stage, t: float, units: dict[int, tuple[float, float, int]],
                        *, protected: set[int], nf: tuple[int, int, int],
                        launches: list[Launch]) -> tuple[set[int], tuple[int, int, int]]:
        """Launch stage ``s``'s ready units up to :meth:`_launch_limit`; returns the new H, n_f."""
        ready, counts = self._ready[s], self.tracker.counts
        if not ready:
            return protected, nf
        gates = self._gates()
        lane_use = self._lane_use(s) if gates else None
        limit, pressed = self._stage_limit(s, t, lane_use)
        # Unpressed, admission must see the launch limit as unbatched XInfer sees its
        # slots: a unit it admits holds a lane until done, which protected work may need.
        self._admit_slots[s] = self.slots[s] if pressed else limit
        if counts[s] >= limit:
            return protected, nf
        checks = not (self.entry_only and s != Stage.VIT)
        order = _by_priority(ready.values(), protected)
        deferred: set[int] = set()
        scan = _StageScan(s, nf, self._nf_index if nf == self._nf else
                          self.predictor.index(nf))
        strict = self.strict_priority
        # The scan refuses every ordinary candidate (until the next launch): the rest
        # are deferred without asking _admits, which would give the same answer.
        refused = False
        lazy = self.lazy_slots
        # ride_along: the stage's units on lanes; more launched ones wait for a batch.
        on_lanes = (lane_use[0] if lane_use is not None and self.ride_along
                    and pressed and s != Stage.VIT else None)
        i = 0
        while i < len(order) and counts[s] < limit:
            r = order[i]
            i += 1
            rid = r.request_id
            is_prot = rid in protected
            if not is_prot and lazy != "off" and (
                    counts[s] if lazy == "stage" else any(counts)):
                deferred.add(rid)  # lazy_slots: ordinary work waits for a busy stage/device
                continue
            if not is_prot and checks and not (on_lanes is not None
                                               and counts[s] > on_lanes):
                if refused:
                    deferred.add(rid)
                    continue
                if not self._admits(r, scan, t, protected, units):
                    deferred.add(rid)
                    # Scan-wide answers: CURRENTFEASIBLE (or the slot check) failed, or
                    # strict priority while anything is protected. A forecast refusal
                    # depends on the candidate's deadline: the next one is asked.
                    refused = bool(protected) if strict else scan.current_ok is False
                    continue
            if self.record_admissions and not is_prot:
                self.admissions.append(AdmissionRecord(
                    t, rid, s, frozenset(protected), nf, scan.plus,
                    checks and not self.strict_priority))
            launches.append(self._issue(r, s, t, is_prot))
            units[rid] = (self.predictor.h[s], self.predictor.work[s], s)  # nothing done yet
            protected, nf = self._refresh(t, units)
            self._rem_cache.clear()
            scan = _StageScan(s, nf, self._nf_index)
            refused = False
            if s != Stage.ACTION and ready:
                # Prefill and ViT rebuild their order after a launch; work deferred in
                # this scan stays deferred unless it has become protected.
                order = _by_priority((x for x in ready.values()
                                      if x.request_id not in deferred
                                      or x.request_id in protected), protected)
                i = 0
        return protected, nf

    # -- admission of an ordinary candidate (Alg. 1 lines 8-12) ------------------------------
    def _admits(self, r: Request, scan: _StageScan, t: float, protected: set[int],
                units: dict[int, tuple[float, float, int]]) -> bool:
        """Whether ordinary ``r`` may launch ``scan.stage`` now, by the enabled checks.

        Strict priority admits it only when nothing is protected. Otherwise the
        protected set must stay feasible (CURRENTFEASIBLE, slot-aware when enabled)
        and, arrival-aware, so must the forecasts with earlier deadlines
        (FORECASTFEASIBLE) and, with ``forecast_load``, H once they arrive.
        """
        # The cached answers are read here so that a candidate the scan has already
        # decided for costs one call: this runs for every deferred candidate.
        if self.strict_priority:
            return not protected
        ok = scan.current_ok
        if ok is None:
            ok = self._current_admits(scan, t, protected, units)
        if not ok or not self.arrival_aware:
            return ok
        if scan.forecasts is None:
            self._generate_forecasts(scan, t, protected, units)
        if not scan.forecasts:
            return True
        # k: the forecasts the candidate retains (deadlines before its own).
        k = bisect_left(scan.forecast_ells, r.deadline)
        if k == 0:
            return True
        ok = scan.forecast_memo.get(k)
        if ok is None:
            ok = self._forecast_admits(scan, t, r, k)
        return ok and self._forecast_load_admits(scan, t, k, protected, units)

    def _current_admits(self, scan: _StageScan, t: float, protected: set[int],
                        units: dict[int, tuple[float, float, int]]) -> bool:
        """CURRENTFEASIBLE at n+, then the slot check when slot-aware.

        Evaluated once per scan: it is the same for every ordinary candidate of the
        stage until the next launch.
        """
        if scan.current_ok is None:
            s = scan.stage
            plus_index = self.predictor.plus[scan.nf_index][s]
            ok = not protected or self._current_feasible(protected, t, plus_index, units)
            if ok and self.slot_aware:
                scan.slot_ctx = self._slot_context(protected, t, s, plus_index,
                                                   nf=scan.nf, units=units)
                ok = scan.slot_ctx.feasible()
            scan.current_ok = ok
        return scan.current_ok

    def _generate_forecasts(self, scan: _StageScan, t: float, protected: set[int],
                            units: dict[int, tuple[float, float, int]]) -> None:
        """Forecasts during the scan's unit, their sorted deadlines and projected loads."""
        scan.forecasts = self._forecasts(t, scan.stage, scan.nf_index)
        if scan.forecasts and self.arrival_projection:
            scan.projected = self._project_loads(t, scan.stage, scan.nf, units=units,
                                                 protected=protected, forecasts=scan.forecasts)
        scan.forecast_ells = sorted([ell for ell, _ in scan.forecasts])

    def _forecast_admits(self, scan: _StageScan, t: float, r: Request, k: int) -> bool:
        """FORECASTFEASIBLE for a candidate retaining ``k`` forecasts.

        It depends on the candidate only through ``k``, so the answer is memoised in
        the scan and candidates retaining as many share one evaluation.
        """
        assert scan.forecasts is not None
        ok = self._forecast_feasible(r, scan.forecasts, scan.plus, slot_ctx=scan.slot_ctx,
                                     t=t, projected=scan.projected)
        scan.forecast_memo[k] = ok
        return ok

    def _forecast_load_admits(self, scan: _StageScan, t: float, k: int, protected: set[int],
                              units: dict[int, tuple[float, float, int]]) -> bool:
        """With ``forecast_load``: H stays feasible once the ``k`` forecasts arrive.

        Their ViT units are added to n+.
        """
        if not (self.forecast_load and protected):
            return True
        pv, pp, pa = scan.plus
        return self._current_feasible(protected, t, self.predictor.index((pv + k, pp, pa)),
                                      units)

    # -- hooks ---------------------------------------------------------------------------------
    def _protected_ids(self) -> frozenset[int]:
        return frozenset(self._protected)

    def _on_removed(self, request: Request) -> None:
        # Keeps P ⊆ J (Alg. 2 line 1) incrementally.
        rid = request.request_id
        self._promoted.discard(rid)
        self._protected.discard(rid)
        self._late_set_cache.discard(rid)


def _pressed(batched: int, alone: int, units: int, *, ties: bool) -> bool:
    """The pressure verdict on a backlog of ``units``, given how many each service keeps.

    Batches win when they keep more deadlines; with ``ties`` also when they keep as
    many and serving alone misses one.
    """
    if ties:
        return batched >= alone and alone < units
    return batched > alone


def _on_time(deadlines: Sequence[float], lane_free: Sequence[float],
             durations: Sequence[float], rest: float, most: int) -> int:
    """Units done by their ``deadlines`` (sorted) when lanes run batches of up to ``most``.

    The lane predicted free first (``lane_free``) runs the next up to ``most`` units as
    one batch of duration ``durations[k − 1]``; each unit then needs ``rest`` more.
    """
    free = list(lane_free)
    heapq.heapify(free)
    kept, i, n = 0, 0, len(deadlines)
    while i < n:
        k = min(most, n - i)
        end = heapq.heappop(free) + durations[k - 1]
        limit = end + rest
        kept += sum(1 for dl in deadlines[i:i + k] if limit <= dl)
        heapq.heappush(free, end)
        i += k
    return kept


def batch_former(policy: Policy) -> XInferPolicy | None:
    """``policy`` when it forms its lanes' batches (issue 28: ``max_batch`` above one), else None.

    The one test the engine and the simulator use to hand batch formation to the policy.
    ``saturation_switch`` does not form batches: it sets how many units launch, and the
    lanes batch them oldest first.
    """
    if (isinstance(policy, XInferPolicy) and policy.batch_cost is not None
            and not policy.saturation_switch):
        return policy
    return None
