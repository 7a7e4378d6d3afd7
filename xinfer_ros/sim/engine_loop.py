"""Discrete-event closed-loop fleet simulation driving the scheduler's policy objects.

One run: closed-loop robots (Eq. 1) send requests over a link (δ split in up/down);
the server spends a CPU preparation delay, then hands the request to the policy
(``xinfer_ros.core`` policy object, the same the engine and ROS server use); units the
policy launches run on the modelled GPU (:mod:`xinfer_ros.sim.gpu`) at the rate table's
concurrent rates; after Action the server spends ``h_out`` on output processing and the
response travels back. The policy is invoked after every batch of same-instant events
(arrivals, completions) and on periodic ticks while ready work is waiting for it.

Everything is seeded: the same :class:`SimConfig` gives the same records.
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Any, cast

import numpy as np

from xinfer_ros.core.batch_formation import BatchPlan
from xinfer_ros.core.clients import Link, Robot
from xinfer_ros.core.constants import (
    LINK_DELAY,
    MEASUREMENT_WINDOW,
    PHASE_LENGTH,
    POLICY_TICK,
    RUN_DURATION,
    SEND_PERIOD,
)
from xinfer_ros.core.metrics import (
    ResponseRecord,
    WindowMetrics,
    attainment_in_windows,
    attainment_over_time,
    summarize,
)
from xinfer_ros.core.phase_spread import PhaseSpreader
from xinfer_ros.core.policy import Policy
from xinfer_ros.core.prediction_audit import AuditSummary, PredictionAudit
from xinfer_ros.core.rate_table import RateTable, resolve_rate_table
from xinfer_ros.core.request import Request
from xinfer_ros.core.stages import STAGES
from xinfer_ros.core.timing import deadline
from xinfer_ros.core.xinfer_policy import batch_former
from xinfer_ros.sim.decisions import DecisionRecorder
from xinfer_ros.sim.gpu import BatchedGpuModel, GpuModel
from xinfer_ros.sim.workloads import Workload, build_workload

__all__ = [
    "RunResult",
    "SimConfig",
    "Simulation",
    "make_sim_policy",
    "run_config",
    "simulate",
]


#: Longest time (s) in-flight requests may take to drain after the last send.
_DRAIN_LIMIT = 60.0

# Event kinds (ints: cheaper to compare than enums in the hot loop). _WAKE: a lead held
# for mates reaches its start_by (the policy forms batches, issue 28).
_SEND, _ARRIVE, _READY, _RESPOND, _WAKE = 0, 1, 2, 3, 4


@dataclass(frozen=True)
class SimConfig:
    """Everything that defines one simulated run (picklable, for worker processes).

    Attributes:
        policy: Policy name for ``make_policy`` (``fifo``, ``edf``, ``slack_gate``,
            ``xinfer`` or an ablation name the core registers).
        robots: Robot count (bursty: base robots).
        workload: Workload name (see :data:`xinfer_ros.sim.workloads.WORKLOADS`).
        seed: Seeds start jitter, trace offsets and execution noise.
        duration: Last send time (s); in-flight requests are drained afterwards.
        window: Measurement window by send time (s).
        policy_kwargs: Extra keyword arguments for the policy constructor.
        rate_table: Rate-table file (``None``: the shipped default).
        noise: Log-normal sigma of per-unit execution-time noise.
        rate_error: Log-normal sigma of a per-(stage, concurrency) rate factor fixed for
            the run: how far the GPU's rates lie from the predictor's table
            (:mod:`xinfer_ros.sim.prediction_error` sets it with ``noise`` from a
            target prediction error).
        audit: Measure the running-stage prediction error (the engine's audit,
            :class:`~xinfer_ros.core.prediction_audit.PredictionAudit`) in the window.
        cpu_prep: Server CPU preparation before ViT is ready (s).
        link_up: Client-to-server transport (s).
        link_down: Server-to-client transport (s).
        tick: Policy tick period while ready work waits (s); policies whose
            ``time_dependent`` is False (fifo, edf) are never ticked.
        period: Minimum send period T_E (s).
        send_jitter: Mean of an exponential client-side handling delay added to every
            send after the first (s); 0 keeps Eq. 1 exact. Jitter lets the robots'
            phases drift into each other, as independent robots' clocks do.
        slots: Execution slots per stage (``None``: the core default).
        phase_spread: Hold responses that return later than ``T_E`` (within their
            deadline) so their robots' next sends land in the widest phase gap
            (:mod:`xinfer_ros.core.phase_spread`); off reproduces the paper's server.
        budgets_ms: Custom/uniform budgets (ms).
        budget_scale: Factor on every budget of the workload.
        phase_length: Responses per budget phase.
        budget_csv: Per-response budget CSV for ``custom``.
        parcel_traces: Parcel trace file (``None``: the shipped set).
        keep_records: Return the raw records in the result.
        timeline_bin: Bin (s) of the attainment-over-time series (0 disables it).
        max_batch: Units of a stage run in batches of up to this many on
            ``ceil(slots / max_batch)`` lanes (:class:`~xinfer_ros.sim.gpu.BatchedGpuModel`;
            use a table calibrated with the same ``max_batch``); 1 is the paper's GPU.
    """

    policy: str = "xinfer"
    robots: int = 8
    workload: str = "phases"
    seed: int = 0
    duration: float = RUN_DURATION
    window: tuple[float, float] = MEASUREMENT_WINDOW
    policy_kwargs: dict[str, object] = field(default_factory=dict)
    rate_table: str | None = None
    noise: float = 0.05
    rate_error: float = 0.0
    audit: bool = False
    cpu_prep: float = 1.0e-3
    link_up: float = LINK_DELAY
    link_down: float = LINK_DELAY
    tick: float = POLICY_TICK
    period: float = SEND_PERIOD
    send_jitter: float = 0.0
    slots: tuple[int, int, int] | None = None
    phase_spread: bool = False
    budgets_ms: tuple[float, ...] | None = None
    budget_scale: float = 1.0
    phase_length: int = PHASE_LENGTH
    budget_csv: str | None = None
    parcel_traces: str | None = None
    keep_records: bool = False
    timeline_bin: float = 0.0
    max_batch: int = 1

    def with_(self, **changes: Any) -> SimConfig:
        """Return a copy with ``changes`` applied."""
        return replace(self, **changes)


@dataclass
class RunResult:
    """Outcome of one run.

    Attributes:
        config: The run's configuration (as a dict).
        metrics: Window metrics.
        records: Raw client records (only with ``keep_records``).
        timeline: ``(bin_starts, attainment)`` lists when ``timeline_bin`` > 0.
        burst_attainment: Attainment over the workload's burst windows (``bursty``:
            60-80 s and 120-140 s by send time); ``None`` for other workloads.
        gpu_utilisation: Share of time with at least one unit issued.
        prediction: The prediction audit's summary (``audit``), else ``None``.
        policy_calls: Number of policy decisions.
        events: Number of processed events.
        wall_s: Wall-clock seconds the run took.
    """

    config: dict[str, Any]
    metrics: WindowMetrics
    records: list[ResponseRecord] | None = None
    timeline: tuple[list[float], list[float]] | None = None
    burst_attainment: float | None = None
    gpu_utilisation: float = 0.0
    prediction: AuditSummary | None = None
    policy_calls: int = 0
    events: int = 0
    wall_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (records and wall time left out so outputs are reproducible)."""
        out: dict[str, Any] = {
            "config": self.config,
            "metrics": self.metrics.to_dict(),
            "gpu_utilisation": self.gpu_utilisation,
            "policy_calls": self.policy_calls,
            "events": self.events,
        }
        if self.burst_attainment is not None:
            out["burst_attainment"] = self.burst_attainment
        if self.timeline is not None:
            out["timeline"] = {"bin_start_s": self.timeline[0], "attainment": self.timeline[1]}
        if self.prediction is not None:
            out["prediction"] = self.prediction
        return out


def make_sim_policy(cfg: SimConfig, table: RateTable) -> Policy:
    """Build the configured policy object through the core's registry."""
    from xinfer_ros.core import make_policy
    from xinfer_ros.core.registry import forms_batches

    kwargs = dict(cfg.policy_kwargs)
    kwargs.setdefault("rate_table", table)
    if forms_batches(cfg.policy):
        kwargs.setdefault("max_batch", cfg.max_batch)  # the policy forms the GPU's batches
    if cfg.slots is not None:
        kwargs.setdefault("slots", cfg.slots)
    return make_policy(cfg.policy, **kwargs)


class Simulation:
    """One closed-loop run; call :meth:`run` once.

    Args:
        cfg: Run configuration.
        workload: Prebuilt workload (default: built from ``cfg``).
        policy_factory: Override for building the policy (tests, custom policies).
        decisions: Times every policy call of the run (the decision-cost benchmark).
    """

    def __init__(
        self,
        cfg: SimConfig,
        workload: Workload | None = None,
        policy_factory: Callable[[SimConfig, RateTable], Policy] | None = None,
        decisions: DecisionRecorder | None = None,
    ) -> None:
        self.cfg = cfg
        self.decisions = decisions
        self.table = resolve_rate_table(cfg.rate_table)
        self.workload = workload or build_workload(
            cfg.workload,
            cfg.robots,
            cfg.seed,
            budgets_ms=cfg.budgets_ms,
            phase_length=cfg.phase_length,
            budget_csv=cfg.budget_csv,
            parcel_traces=cfg.parcel_traces,
            duration=cfg.duration,
            window=cfg.window,
            budget_scale=cfg.budget_scale,
        )
        self.policy = (policy_factory or make_sim_policy)(cfg, self.table)
        self.link = Link(cfg.link_up, cfg.link_down)
        args = (self.table.rate, self.table.work, self.table.overhead, self.policy.slots)
        common: dict[str, Any] = dict(noise=cfg.noise, seed=cfg.seed,
                                      rate_error=cfg.rate_error, max_batch=cfg.max_batch)
        # Batch factors price the batches a forming policy chooses (its BatchCost's,
        # the same object); lane batching prices units by the cells, in the engine too.
        former = batch_former(self.policy)
        factors = (former.batch_cost.factors
                   if former is not None and former.batch_cost is not None else None)
        self.gpu = (GpuModel(*args, **common) if cfg.max_batch == 1 else
                    BatchedGpuModel(*args, batch_factors=factors, **common))
        self._flush = self._batch_former()
        #: start_by of the latest wake-up pushed for a held lead.
        self._wake_at = math.inf
        self.audit = PredictionAudit(keep_from=cfg.window[0]) if cfg.audit else None
        self.robots = [Robot(spec, cfg.period) for spec in self.workload.robots]
        # (time, sequence, kind, robot, budget, arrival): the budget rides with a send,
        # arrival and response; the arrival time from arrival to readiness.
        self._heap: list[tuple[float, int, int, int, float, float]] = []
        self._seq = 0
        # Ready-but-not-launched units per stage: ticks run only while these wait for
        # a policy that deferred them, so an idle or saturated GPU costs no ticks.
        self._pending = [0, 0, 0]
        self.policy_calls = 0
        self.events = 0
        self._jitter_rng = np.random.default_rng(np.random.SeedSequence([cfg.seed, 0x717]))
        self.spreader = (PhaseSpreader(period=cfg.period, lead=self.link.delta)
                         if cfg.phase_spread else None)
        # Policies say themselves whether time alone can change their decisions
        # (Policy.time_dependent); only those are ticked while work waits.
        self._ticks = self.policy.time_dependent
        # Lane spreading (Policy.spreads_lanes) is asked after each decision only of a
        # batched GPU and a policy that may spread: the hot loop skips the call otherwise.
        self._spreads = (isinstance(self.gpu, BatchedGpuModel)
                         and type(self.policy).spreads_lanes is not Policy.spreads_lanes)

    def _batch_former(self) -> Callable[[float], None] | None:
        """Let a batch-forming policy choose the GPU's batches (issue 28); the flush hook.

        Raises:
            ValueError: the policy's max_batch differs from the simulated GPU's.
        """
        policy = batch_former(self.policy)
        if policy is None or policy.batch_cost is None:
            return None
        cost, gpu = policy.batch_cost, self.gpu
        if not isinstance(gpu, BatchedGpuModel) or cost.max_batch != self.cfg.max_batch:
            raise ValueError(f"policy {self.cfg.policy!r} forms batches of {cost.max_batch} "
                             f"but the simulated GPU runs max_batch {self.cfg.max_batch}")
        # The GPU model's keys are the policy's request ids, typed as objects there.
        plan: Callable[[int, list[object], float], BatchPlan] = \
            policy.plan_batch  # type: ignore[assignment]
        # Holds shorter than a tick start at once, as on the engine's dispatcher.
        gpu.min_hold = self.cfg.tick
        gpu.on_start = policy.start_batch  # type: ignore[assignment]
        recorder = self.decisions
        if recorder is None:
            def former(s: int, keys: list[object], t: float) -> tuple[tuple[int, ...], float]:
                p = plan(s, keys, t)
                return p.members, p.start_by
            gpu.former = former
            return gpu.flush
        clock = recorder.clock

        def timed_plan(s: int, keys: list[object], t: float) -> tuple[tuple[int, ...], float]:
            # Batch formation is decision work: its cost joins the instant's sample.
            t0 = clock()
            p = plan(s, keys, t)
            recorder.add_to_last(t, clock() - t0)
            return p.members, p.start_by

        gpu.former = timed_plan
        return gpu.flush

    def _push(self, t: float, kind: int, robot: int, budget: float = 0.0,
              arrival: float = 0.0) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (t, self._seq, kind, robot, budget, arrival))

    def _decide(self, t: float) -> None:
        """Ask the policy for launches at ``t`` and start them on the GPU."""
        self.policy_calls += 1
        out = (self.policy.schedule(t) if self.decisions is None
               else self.decisions.schedule(self.policy, t))
        gpu = self.gpu
        pending = self._pending
        if self._spreads:  # before the launches, as the engine's dispatcher reads it
            cast(BatchedGpuModel, gpu).spread = self.policy.spreads_lanes()
        for launch in out.launches:
            s = int(launch.stage)
            if launch.batch_limit and isinstance(gpu, BatchedGpuModel):  # its lanes batch
                gpu.issue(launch.request.request_id, s, t, limit=launch.batch_limit)
            else:
                gpu.issue(launch.request.request_id, s, t)
            pending[s] -= 1
        if self._flush is not None:
            self._flush(t)
            wake = cast(BatchedGpuModel, gpu).next_hold
            if wake < math.inf and wake != self._wake_at:
                self._wake_at = wake
                self._push(wake, _WAKE, -1)
        if self.audit is not None:  # after the launches, as the engine samples
            self.audit.maybe_sample(self.policy, t)

    def _needs_tick(self) -> bool:
        pending, gpu, policy = self._pending, self.gpu, self.policy
        return any(pending[s] > 0 and gpu.free(s) > 0 and not policy.at_own_limit(s)
                   for s in range(3))

    # Inlined on purpose: the simulator's hot loop; locals and inlining keep sweeps fast.
    def run(self) -> RunResult:  # noqa: PLR0912, PLR0915
        """Simulate until every robot stopped and every request was answered."""
        wall0 = time.perf_counter()
        cfg, gpu, policy, robots = self.cfg, self.gpu, self.policy, self.robots
        heap = self._heap
        complete: Callable[..., object] = policy.complete
        add_request: Callable[..., object] = policy.add_request
        # As the engine reports every unit's forward (the saturation switch's meter).
        forward: Callable[..., object] = policy.observe_forward
        if self.decisions is not None:
            complete = self.decisions.timed(complete, "complete")
            add_request = self.decisions.timed(add_request, "arrival")
            forward = self.decisions.timed(forward, "complete")
        # δ is the two links; the deadline takes them off one at a time, the order the
        # simulator has always used (a + b − δ in one step differs in the last bit).
        up, down, prep, h_out = self.link.up, self.link.down, cfg.cpu_prep, self.table.h_out
        end_send = cfg.duration
        for i, r in enumerate(robots):
            if r.spec.start < end_send:
                self._push(r.spec.start, _SEND, i)
        next_rid = 0
        # request id -> (robot, budget, arrival at the server)
        inflight: dict[int, tuple[int, float, float]] = {}
        spreader = self.spreader
        pending = self._pending
        next_tick = math.inf
        tick = cfg.tick
        dirty = False
        inf = math.inf
        # A policy that defers some work forever would otherwise tick forever.
        drain_until = end_send + _DRAIN_LIMIT
        while True:
            t_heap = heap[0][0] if heap else inf
            t_gpu = gpu.next_finish
            t = min(t_heap, t_gpu, next_tick)
            if t == inf or t > drain_until:
                break
            self.events += 1
            if t_gpu <= t_heap and t_gpu <= next_tick:
                unit = gpu.pop_finished(t)
                rid, s = cast(int, unit.key), unit.stage  # the loop issues request ids
                forward(s, t - unit.started, unit.batch, t)
                complete(rid, s, t)
                if self.audit is not None:
                    self.audit.observe_end(rid, STAGES[s], t)
                if s < 2:
                    pending[s + 1] += 1
                else:
                    robot, budget, arrival = inflight.pop(rid)
                    ready = t + h_out
                    if spreader is not None:
                        ready = spreader.release_time(
                            str(robot), ready, arrival, deadline(arrival, budget, up) - down)
                    self._push(ready + down, _RESPOND, robot, budget)
                dirty = True
            elif t_heap <= next_tick:
                _, _, kind, i, sent_budget, sent_at = heapq.heappop(heap)
                if kind == _SEND:
                    budget = robots[i].send(t)
                    self._push(t + up, _ARRIVE, i, budget)
                elif kind == _ARRIVE:
                    # The request reaches the server now (a_j); the policy sees it once
                    # CPU preparation is done, with its deadline still counted from a_j.
                    self._push(t + prep, _READY, i, sent_budget, t)
                elif kind == _READY:
                    arrival, budget = sent_at, sent_budget
                    rid = next_rid
                    next_rid += 1
                    req = Request(rid, str(robots[i].spec.robot_id), arrival, budget,
                                  delta=up + down)
                    inflight[rid] = (i, budget, arrival)
                    if spreader is not None:
                        spreader.record_arrival(str(i), arrival, budget)
                    add_request(req, t)
                    pending[0] += 1
                    dirty = True
                elif kind == _RESPOND:
                    rb = robots[i]
                    nxt = rb.receive(t, sent_budget)
                    if cfg.send_jitter > 0.0:
                        nxt += float(self._jitter_rng.exponential(cfg.send_jitter))
                    if nxt < end_send and rb.can_send():
                        self._push(nxt, _SEND, i)
                elif kind == _WAKE:
                    dirty = True
            else:
                next_tick = inf
                dirty = True
            # Decide once per instant, after every same-time event has been recorded.
            if dirty:
                t_next = min(heap[0][0] if heap else inf, gpu.next_finish)
                if t_next > t:
                    self._decide(t)
                    dirty = False
                    if next_tick == inf and self._ticks and self._needs_tick():
                        next_tick = t + tick
        for rb in robots:
            rb.close()  # an unanswered request is only possible if a policy starved it
        return self._result(time.perf_counter() - wall0)

    def _result(self, wall: float) -> RunResult:
        records = [rec for r in self.robots for rec in r.records]
        records.sort(key=lambda rec: rec.send_time)
        metrics = summarize(records, self.cfg.window,
                            wide_budget=max(self.workload.budget_values()))
        timeline = None
        if self.cfg.timeline_bin > 0:
            ts, att = attainment_over_time(records, self.cfg.timeline_bin, self.cfg.window)
            timeline = (ts.tolist(), att.tolist())
        windows = self.workload.meta.get("burst_windows")
        burst = attainment_in_windows(records, windows) if windows else None  # type: ignore[arg-type]
        end = max((rec.response_time or 0.0) for rec in records) if records else 0.0
        cfg = asdict(self.cfg)
        return RunResult(
            config=cfg,
            metrics=metrics,
            records=records if self.cfg.keep_records else None,
            timeline=timeline,
            burst_attainment=burst,
            gpu_utilisation=self.gpu.utilisation(end) if end > 0 else 0.0,
            prediction=self.audit.summary() if self.audit is not None else None,
            policy_calls=self.policy_calls,
            events=self.events,
            wall_s=wall,
        )


def simulate(
    cfg: SimConfig,
    workload: Workload | None = None,
    policy_factory: Callable[[SimConfig, RateTable], Policy] | None = None,
    decisions: DecisionRecorder | None = None,
) -> RunResult:
    """Run one simulation (see :class:`Simulation` for the arguments)."""
    return Simulation(cfg, workload, policy_factory, decisions).run()


def run_config(cfg: SimConfig) -> RunResult:
    """Top-level worker entry point for process pools."""
    return simulate(cfg)
