"""The asynchronous stage engine (paper §4.2, §5, §6.4).

Request path: CPU preparation → ViT → Prefill → Action → CPU output. A single
dispatcher thread owns the scheduling policy (policies are not thread-safe) and reacts
to events: a prepared request (``add_request``), a unit completion (``complete``), a
cancellation, a policy switch, and periodic ticks. After each batch of events it calls
``schedule`` once and hands every launch to a lane. Each unit advances on its own
completion event; there is no round barrier unless the ``round_barrier`` switch asks
for one.

Bounds: at most ``max_live`` requests hold state at any time (``submit`` refuses or
sheds beyond it, there is no unbounded queue), and at most ``slots[s]`` units of
stage ``s`` run. Failures stay local: a request whose inputs fail validation is
rejected, a request whose stage raises fails with the exception text (a batch that
raises is rerun unit by unit, so only the faulty request fails), and its slot is
released for the others.

Parts: :mod:`~xinfer_ros.engine.admission` decides which requests may hold state,
:mod:`~xinfer_ros.engine.gates` which launches the slots and switches allow, and
:mod:`~xinfer_ros.engine.delivery` finishes every request once, stamping each result
with its deadline and release time (:mod:`~xinfer_ros.engine.spreading`); this module
is the dispatcher between them, the lanes and the policies.

Fast path (``EngineConfig.fast_path``): a lone request would cost twelve thread
wake-ups (caller, CPU lane, dispatcher, ViT lane, dispatcher, Prefill lane, dispatcher,
Action lane, dispatcher, CPU lane, dispatcher, caller), each of which waits for a core
on a busy host. Every dispatcher step runs under one lock (the *step lock*), so the
policy never runs on two threads at once. While the engine is idle (only that request
anywhere, no event pending, no draining policy), the thread that produced the
request's next event takes the step itself: the same handler, decision, launches and
delivery the dispatcher would run. Where the backend allows it
(``Backend.chains_stages``), ``submit`` hands such a request to the one *fast* lane,
which prepares it and runs each unit the step launches (or the batch a batch-forming
policy forms of it), and its output, back to back: two wake-ups. Whatever arrives
mid-chain (a request, a cancel, a policy or switch change) makes the next step find
the engine busy: the event goes to the dispatcher, which continues the request on the
ordinary lanes.

Thread-safety: :meth:`StageEngine.submit`, :meth:`cancel`, :meth:`set_policy`,
:meth:`stats` and :meth:`close` may be called from any thread (e.g. ROS callbacks).
Result callbacks run on engine threads and must return quickly.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, replace

import numpy as np

from xinfer_ros.core.batch_audit import BatchAudit
from xinfer_ros.core.errors import InvalidRequestError, XInferError
from xinfer_ros.core.policy import Launch, Policy, SchedulerOutput
from xinfer_ros.core.prediction_audit import PredictionAudit
from xinfer_ros.core.rate_correction import RateCorrection
from xinfer_ros.core.rate_table import RateTable, default_rate_table
from xinfer_ros.core.registry import forms_batches, is_xinfer, make_policy
from xinfer_ros.core.request import Request
from xinfer_ros.core.stages import STAGES, Stage
from xinfer_ros.core.timing import MS_PER_S
from xinfer_ros.core.xinfer_policy import XInferPolicy, batch_former
from xinfer_ros.engine.admission import LiveRequest, LiveTable, ResultCallback, expiry
from xinfer_ros.engine.api import EngineStats
from xinfer_ros.engine.backends.base import AnyBackend, InputValidationError
from xinfer_ros.engine.backends.emulated import EMULATION_NOTICE
from xinfer_ros.engine.batching import BatchQueue, BatchSizes, FormedBatches, UnitRunner, Waiting
from xinfer_ros.engine.clock import Clock
from xinfer_ros.engine.delivery import ResultDelivery
from xinfer_ros.engine.events import (
    Cancelled,
    Dropped,
    Event,
    EventQueue,
    OutputDone,
    PolicySwitch,
    Prepared,
    RequestEvent,
    Stop,
    SwitchesChange,
    UnitDone,
    Wake,
    WorkerEvent,
)
from xinfer_ros.engine.gates import ExecutionGates
from xinfer_ros.engine.lanes import (
    ACTION_GROUP,
    CONTEXT_GROUP,
    CPU_GROUP,
    FAST_GROUP,
    LaneGroup,
    SharedExclusiveGate,
    current_lane,
)
from xinfer_ros.engine.spreading import ReleasePlanner
from xinfer_ros.engine.types import EngineConfig, EngineResult, Status
from xinfer_ros.model.inputs import RequestInputs

__all__ = ["ResultCallback", "StageEngine"]

_LOG = logging.getLogger("xinfer_ros.engine")
#: Budgets the engine warns about as shorter than a request alone (then it stays quiet).
_HOPELESS_NOTES = 32

#: Resolved forecasts the prediction audit keeps (the latest), so that a server running
#: for days does not grow with it (about 200 bytes each, 10 MB at most). A 60 s engine
#: benchmark resolves fewer: at most 14 running units (the default slots) per sample,
#: one sample per 20 ms (``sample_period_s``), 42,000.
_AUDIT_SAMPLES = 50_000

#: The :class:`StageTimings` field of each stage's unit time.
_STAGE_FIELD = {Stage.VIT: "vit_ms", Stage.PREFILL: "prefill_ms", Stage.ACTION: "action_ms"}


@dataclass(frozen=True, slots=True)
class _Started:
    """Work a step started: a unit of ``stage``, a batch a policy formed, or an output."""

    #: The stage of a launched unit or formed batch (None for an output).
    stage: Stage | None = None
    #: The request whose output processing starts (None for a unit).
    live: LiveRequest | None = None
    #: Engine time of the decision.
    now: float = math.nan
    #: The units of a batch a policy formed, its lane already counted busy (None for a
    #: unit the lanes batch themselves).
    formed: list[Waiting] | None = None


class StageEngine:
    """Serve VLA requests through a policy-driven, lane-based stage pipeline.

    Args:
        backend: model implementation (emulated or torch).
        policy: registry name (``xinfer``, ``fifo``, ``edf``, ``slack_gate``) or a policy
            object built with matching ``slots``.
        config: engine switches and bounds.
        rate_table: the predictor's table (default: the shipped one). The emulated
            backend should be built on the same table.
        clock: engine clock (time-compressed only with the emulated backend).
        policy_kwargs: extra constructor arguments for a policy given by name.

    Example (a ROS node)::

        engine = StageEngine(make_backend("torch", model="tiny"), "xinfer")
        engine.start()
        engine.submit(inputs, budget=0.090, robot_id="r1", callback=publish_chunk)
        engine.cancel("r1")               # robot left: cancelled at the next boundary
        engine.set_policy("edf")          # live requests keep running under the old one
        engine.close()
    """

    def __init__(
        self,
        backend: AnyBackend,
        policy: str | Policy = "xinfer",
        config: EngineConfig | None = None,
        *,
        rate_table: RateTable | None = None,
        clock: Clock | None = None,
        policy_kwargs: dict[str, object] | None = None,
    ) -> None:
        self.backend = backend
        self.config = config if config is not None else EngineConfig()
        self.rate_table = rate_table if rate_table is not None else default_rate_table()
        self.clock = clock if clock is not None else Clock()
        if self.clock.scale != 1.0 and not backend.emulated:
            raise ValueError("a time-compressed clock needs the emulated backend")
        bind = getattr(backend, "bind_clock", None)
        if callable(bind):
            bind(self.clock)
        self._policy_kwargs = dict(policy_kwargs or {})
        #: One online rate correction shared by every policy this engine runs, so a
        #: policy switch keeps what was learned (None when the config turns it off).
        self.rate_correction: RateCorrection | None = (
            RateCorrection() if self.config.rate_correction else None)
        self.policy: Policy = self._build_policy(policy)
        self._note_lanes_past_bounds()
        #: Old policies still serving their live requests after a switch.
        self._draining: list[Policy] = []
        self.audit = PredictionAudit(self.config.sample_period_s,
                                     max_samples=_AUDIT_SAMPLES)
        self._events = EventQueue()
        #: Held by whichever thread takes a dispatcher step (the dispatcher, or a lane
        #: on the fast path): the policy and everything below run on one thread at once.
        self._step_lock = threading.Lock()
        #: The dispatcher handled a stop: no thread takes steps any more.
        self._halted = False
        #: Set during a step: the units and outputs it starts, which the stepping thread
        #: starts once it has released the step lock (None outside steps).
        self._capture: list[_Started] | None = None
        #: The fast lane's backend setup failed: requests take the ordinary lanes.
        self._fast_broken = False
        self._table = LiveTable(self.config.max_live, self.config.overflow,
                                self.config.supersede)
        #: Dispatcher-owned: what runs, and what the slots and switches allow next.
        self._gates = ExecutionGates(self.config)
        #: Budgets (ms) already reported as shorter than a request alone on the device
        #: (submit threads add to it).
        self._hopeless_noted: set[int] = set()
        self._hopeless_lock = threading.Lock()
        #: Release times of OK results (phase spreading) and the arrivals they avoid.
        self.releases = ReleasePlanner(self.config.phase_spread, self.config.delta,
                                       self.config.phase_spread_margin)
        self._delivery = ResultDelivery(backend, self._table, self.clock, self._note,
                                        self._gates.forget, releases=self.releases)
        self._gate = SharedExclusiveGate(enabled=not self.config.cpu_overlap)
        # Lanes are sized for the configured slots even when intra-stage concurrency is
        # off, so that set_switches can turn it on at run time.
        cfg = self.config
        backend.check_max_batch(cfg.max_batch)
        if backend.compile_mode == "cudagraphs" and cfg.lanes(2) > 1:
            # The captured graphs' static buffers are shared: concurrent replays from
            # several Action lanes would read each other's results.
            raise ValueError(f"compile mode 'cudagraphs' needs one Action lane, got "
                             f"{cfg.lanes(2)} (Action slots / max_batch)")
        #: Launched units waiting for a lane; lanes take them in batches and run them.
        self._waiting = BatchQueue(cfg.max_batch,
                                   lambda stage, live: backend.batch_key(stage, live.state),
                                   lanes=tuple(cfg.lanes(s) for s in range(3)))
        #: Forwards each stage started, by batch size (the benchmark reports them).
        self.batches = BatchSizes()
        self._units = UnitRunner(backend, self._waiting, self._gate, self.clock,
                                 self._report, sizes=self.batches, broke=self._runner_broke)
        #: Launched units of a batch-forming policy: batched by its plan on this
        #: dispatcher, not by the lanes' queue (issue 28).
        self._formed = FormedBatches(
            tuple(cfg.lanes(s) for s in range(3)), cfg.max_batch,
            lambda stage, live: backend.batch_key(stage, live.state), self._plan_failed)
        #: Formed batches' predicted against observed durations (the benchmark reports it).
        self.batch_audit = BatchAudit()
        setup = backend.lane_setup
        # One pool per stage (ViT and Prefill both of the context group): a stage's
        # batches never take the lanes of the other.
        self._stage_lanes = {
            Stage.VIT: LaneGroup(CONTEXT_GROUP, cfg.lanes(0), setup),
            Stage.PREFILL: LaneGroup(CONTEXT_GROUP, cfg.lanes(1), setup, cfg.lanes(0)),
            Stage.ACTION: LaneGroup(ACTION_GROUP, cfg.lanes(2), setup),
        }
        self._cpu = LaneGroup(CPU_GROUP, cfg.cpu_workers, setup)
        #: The fast path's lane (its thread starts with its first chain).
        self._fast = LaneGroup(FAST_GROUP, 1, setup)
        self._thread: threading.Thread | None = None
        #: Policy decisions made and wall seconds spent in them (dispatcher cost).
        self._decisions = 0
        self._decide_s = 0.0
        #: Decisions taken off the dispatcher thread, and units run on the fast lane.
        self._fast_steps = 0
        self._fast_units = 0
        self._stopped = threading.Event()

    # -- construction helpers -----------------------------------------------------------
    def _build_policy(self, policy: str | Policy, **kwargs: object) -> Policy:
        if isinstance(policy, Policy):
            if tuple(policy.slots) != self.config.effective_slots:
                policy.set_slots(self.config.effective_slots)
        else:
            args = {**self._policy_kwargs, **kwargs}
            args.setdefault("slots", self.config.effective_slots)
            args.setdefault("rate_table", self.rate_table)
            if forms_batches(policy):
                args.setdefault("max_batch", self.config.max_batch)
            elif self._switches(policy):
                args.setdefault("saturation_switch", True)
                args.setdefault("max_batch", self.config.max_batch)
            lazy = self.config.lazy_slots
            if lazy != "off":
                if is_xinfer(policy):
                    args.setdefault("lazy_slots", lazy)
                else:
                    self._note("lazy_slots applies to XInfer policies: %s fills every free "
                               "slot", policy, level=logging.WARNING)
            policy = make_policy(policy, **args)
        # Formers and the saturation switch alike size batches by their max_batch.
        cost = policy.batch_cost if isinstance(policy, XInferPolicy) else None
        if cost is not None and cost.max_batch != self.config.max_batch:
            raise ValueError(f"policy {policy.name!r} forms batches of {cost.max_batch} but "
                             f"the engine runs max_batch {self.config.max_batch}")
        if self.rate_correction is not None:
            policy.predictor.set_correction(self.rate_correction)
        return policy

    def _note_lanes_past_bounds(self) -> None:
        """Warn when a stage runs more lanes than its rate table measured side by side.

        Beyond the table's bounds the predictor takes the rate at the bound (Eq. 8
        clipping): a fourth ViT lane on a table calibrated with two costs the other
        units nothing in its eyes, so neither admission nor shedding sees it. On one
        H100 the async engine on 4,4,1 lanes with a 2,2,1 table ran ViT and Prefill
        units 7-12x slower than alone and answered nothing from 16 robots
        (docs/BENCHMARKS.md 1.5).
        """
        cfg, bounds = self.config, self.policy.predictor.bounds
        lanes = tuple(cfg.lanes(s) if cfg.intra_stage else 1 for s in range(3))
        if all(n <= c for n, c in zip(lanes, bounds, strict=True)):
            return
        self._note("the engine runs up to %s lanes per stage (ViT, Prefill, Action) but its "
                   "rate table measured at most %s side by side: beyond that the predictor "
                   "takes the rate at the bound and cannot see what the extra units cost; "
                   "calibrate with those bounds or serve on fewer slots",
                   ",".join(map(str, lanes)), ",".join(map(str, bounds)),
                   level=logging.WARNING)

    def _switches(self, policy: str) -> bool:
        """Whether ``policy`` (a name) batches only when saturated (``batch_when``)."""
        if self.config.batch_when != "saturated" or self.config.max_batch == 1:
            return False
        if is_xinfer(policy):
            return True
        self._note("batch_when=saturated applies to XInfer policies: %s batches whenever "
                   "launched units wait", policy, level=logging.WARNING)
        return False

    def _note(self, msg: str, *args: object, level: int = logging.INFO,
              exc_info: bool = False) -> None:
        """Log through the engine logger; emulated runs say so on every line."""
        prefix = f"{EMULATION_NOTICE} " if self.backend.emulated else ""
        _LOG.log(level, prefix + msg, *args, exc_info=exc_info)

    # -- lifecycle ------------------------------------------------------------------------
    def start(self) -> StageEngine:
        """Start the dispatcher thread (idempotent); returns self."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._dispatch_loop, name="xinfer-dispatch",
                                            daemon=True)
            self._thread.start()
            self._note("engine started: policy=%s slots=%s config=%s", self.policy.name,
                       self.config.effective_slots, self.config.to_dict())
        return self

    @property
    def running(self) -> bool:
        """Started, not closed, and the dispatcher thread alive: requests are served."""
        return self._thread is not None and self._thread.is_alive() and not self._table.closed

    def __enter__(self) -> StageEngine:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self, drain_timeout: float = 5.0) -> None:
        """Stop accepting work, drain live requests, shed the rest, stop all threads.

        Args:
            drain_timeout: engine seconds to wait for live requests to finish.
        """
        if not self._table.close():
            return
        until = self.clock.now() + drain_timeout
        while self.live_count() and self.clock.now() < until and self._thread is not None:
            self.clock.sleep(0.005)
        if self._thread is not None:
            self._events.put(Stop())
            self._thread.join(timeout=10.0)
        for lane in (*self._stage_lanes.values(), self._cpu, self._fast):
            lane.shutdown(wait=True)
        for live in self._table.remaining():
            self._finish(live, Status.SHED, "engine stopped")
        self._note("engine closed: %s", self._table.counts())

    # -- public API -------------------------------------------------------------------------
    def submit(
        self,
        request_inputs: RequestInputs,
        budget: float,
        robot_id: str,
        callback: ResultCallback | None = None,
        *,
        age: float = 0.0,
    ) -> Future[EngineResult]:
        """Submit one request; thread-safe.

        Args:
            request_inputs: what the request asks the model for.
            budget: response-time budget b_j (s, > 0). A front end validates a
                message's milliseconds once, where they enter, with
                :func:`~xinfer_ros.core.timing.budget_seconds`; here the request's
                own invariants (:class:`~xinfer_ros.core.request.Request`) refuse
                what is not a positive finite number.
            robot_id: the sending robot.
            callback: called once with the :class:`EngineResult` (on an engine thread,
                or on the caller's thread for an immediate refusal).
            age: how long ago the request reached the server (s, >= 0; a clock-free
                duration): its deadline counts from that arrival, not from now.

        Returns:
            A future resolved with the same result.
        """
        fut: Future[EngineResult] = Future()
        now = self.clock.now()
        robot = str(robot_id)
        arrival = now - age if age > 0 and math.isfinite(age) else now
        rid = self._table.next_id()
        request: Request | None = None
        try:
            # The one deadline computation (core.timing.deadline), which the policy
            # schedules by and the result reports.
            request = Request(request_id=rid, robot_id=robot, arrival=arrival, budget=budget,
                              delta=self.config.delta)
            refused = ""
        except InvalidRequestError as exc:
            refused = str(exc)
        live = LiveRequest(rid, robot, request, request_inputs, callback, fut, now,
                           arrival=arrival)
        if request is not None:
            request.payload = live
            live.expires_at = expiry(request.deadline, arrival,
                                     self.policy.predictor.isolated_request())
        self.releases.arrived(robot, arrival, live.budget)
        admission = self._table.admit(live) if not refused else None
        if admission is None or admission.refused:
            self._finish(live, Status.REJECTED, admission.refused if admission else refused)
            return fut
        for dropped in admission.dropped:
            self._events.put(Dropped(dropped))
        self._note_if_hopeless(live)
        if self._may_chain(live):
            try:
                self._fast.submit(self._chain_task, live)
                return fut
            except RuntimeError:  # closing: the ordinary path refuses or serves it
                pass
        self._cpu.submit(self._prepare_task, live)
        return fut

    def cancel(self, robot_id: str, reason: str = "robot gone") -> None:
        """Cancel a robot's live requests at their next stage boundary (thread-safe)."""
        self._events.put(Cancelled(str(robot_id), reason))

    def set_policy(self, policy: str | Policy, **kwargs: object) -> Future[str]:
        """Switch the policy at run time without dropping live requests.

        New requests go to the new policy; requests already admitted finish under the
        old one, which keeps dispatching them within the shared physical slots.

        Returns:
            A future resolved with the new policy's name once the switch took effect.
        """
        fut: Future[str] = Future()
        try:
            new = self._build_policy(policy, **kwargs)
        except (ValueError, TypeError) as exc:
            fut.set_exception(exc)
            return fut
        self._events.put(PolicySwitch(new, fut))
        return fut

    def set_switches(self, *, intra_stage: bool | None = None, cpu_overlap: bool | None = None,
                     round_barrier: bool | None = None,
                     cross_stage: bool | None = None) -> Future[EngineConfig]:
        """Change the §6.4 ablation switches at run time (None keeps a switch).

        Units already running finish normally; the new switches apply from the next
        decision. Lanes keep the thread counts of the configured ``slots``.

        Returns:
            A future resolved with the new configuration once applied.
        """
        changes = {k: v for k, v in (("intra_stage", intra_stage), ("cpu_overlap", cpu_overlap),
                                     ("round_barrier", round_barrier),
                                     ("cross_stage", cross_stage)) if v is not None}
        fut: Future[EngineConfig] = Future()
        self._events.put(SwitchesChange(changes, fut))
        return fut

    def live_count(self) -> int:
        """Requests currently holding engine state."""
        return len(self._table)

    def batching(self) -> str:
        """How the lanes batch, for diagnostics (any thread: reads one verdict).

        ``off (max_batch 1)``; ``up to N a forward`` (lane batching, or a policy's
        formation); for a saturation switch ``up to N a forward while saturated``,
        with ``: now saturated`` or ``: now one unit a lane``.
        """
        n = self.config.max_batch
        if n == 1:
            return "off (max_batch 1)"
        policy = self.policy
        if isinstance(policy, XInferPolicy) and policy.saturation_switch:
            now = "one unit a lane" if policy.spreads_lanes() else "saturated"
            return f"up to {n} a forward while saturated: now {now}"
        return f"up to {n} a forward"

    def stats(self) -> EngineStats:
        """Snapshot for diagnostics (thread-safe, approximate while running)."""
        held, held_s = self.releases.held()
        return {"held": held, "held_s": held_s,
                "emulated": self.backend.emulated, "policy": self.policy.name,
                "live": len(self._table), "results": self._table.counts(),
                "running": list(self._gates.running),
                "slots": list(self.config.effective_slots),
                "draining_policies": len(self._draining), "decisions": self._decisions,
                "decision_ms_total": self._decide_s * MS_PER_S,
                "fast_path_steps": self._fast_steps, "fast_path_units": self._fast_units}

    # -- CPU work -----------------------------------------------------------------------------
    def _prepare_task(self, live: LiveRequest) -> None:
        self._report(self._prepare(live))

    def _output_task(self, live: LiveRequest) -> None:
        self._report(self._output(live))

    def _prepare(self, live: LiveRequest) -> Prepared:
        state: object = None
        error: tuple[Status, str] | None = None
        with self._gate.exclusive():
            t1 = self.clock.now()
            try:
                inputs = live.inputs
                assert inputs is not None, "prepared once"
                state = self.backend.prepare(inputs, live.rid, live.robot_id)
            except (InputValidationError, ValueError, TypeError) as exc:
                error = (Status.REJECTED, f"invalid request: {exc}")
            except Exception as exc:  # a faulty request fails alone
                error = (Status.ERROR, f"prepare raised {type(exc).__name__}: {exc}")
        t2 = self.clock.now()
        live.inputs = None  # the raw images are no longer needed
        live.timings.queue_ms += (t1 - live.submitted) * MS_PER_S
        live.timings.prepare_ms = (t2 - t1) * MS_PER_S
        return Prepared(live, state, error)

    def _output(self, live: LiveRequest) -> OutputDone:
        """``live``'s output processing; its event, whatever breaks (it is never rerun)."""
        try:
            t0 = self.clock.now()
            actions: np.ndarray | None = None
            error: str | None = None
            with self._gate.exclusive():
                t1 = self.clock.now()
                try:
                    actions = self.backend.finish(live.state)
                except Exception as exc:  # a faulty request fails alone
                    error = f"output raised {type(exc).__name__}: {exc}"
            t2 = self.clock.now()
            live.timings.queue_ms += (t1 - t0) * MS_PER_S
            live.timings.output_ms = (t2 - t1) * MS_PER_S
        except Exception as exc:  # a bug outside the backend: the request fails, once
            self._note("output of request %d broke outside the backend", live.rid,
                       level=logging.ERROR, exc_info=True)
            return OutputDone(live, None, f"output broke: {type(exc).__name__}: {exc}")
        return OutputDone(live, actions, error)

    # -- dispatcher ---------------------------------------------------------------------------
    def _dispatch_loop(self) -> None:
        tick = self.config.tick_s
        next_tick = math.inf
        try:
            while True:
                wait = (None if next_tick == math.inf
                        else self.clock.wall(next_tick - self.clock.now()))
                batch = self._events.take(wait)
                with self._step_lock:
                    if any(isinstance(e, Stop) for e in batch):
                        self._halted = True
                        break
                    now, started = self._step(batch)
                    self._events.handled(len(batch))
                    needs_tick = self._needs_tick()
                for item in started:
                    self._hand_over(item)
                # Tick only while a time-dependent policy leaves ready work beside free
                # slots, below its own launch limit (its slack checks may pass later);
                # otherwise events suffice.
                if not needs_tick:
                    next_tick = math.inf
                elif next_tick == math.inf or now >= next_tick:
                    next_tick = now + tick
        except Exception:  # pragma: no cover - a bug; never leave callers hanging silently
            self._note("dispatcher crashed", level=logging.ERROR, exc_info=True)
            raise
        finally:
            self._halted = True
            self._stopped.set()

    def _step(self, batch: list[Event]) -> tuple[float, list[_Started]]:
        """Handle ``batch``, then decide once; the caller holds the step lock.

        The units and outputs the step starts are returned, not handed to their lanes:
        the caller starts them once it has released the lock, so that a unit that ends
        at once finds the lock free (and, on an idle engine, takes its own step).

        Returns:
            The engine time of the decision, and what the step started.
        """
        self._capture = []
        try:
            for ev in batch:
                self._handle_safely(ev)
            now = self.clock.now()
            t_cpu = time.perf_counter()
            try:
                self._decide(now)
            except Exception:  # a policy bug must not stop serving; retried next tick
                self._note("policy decision failed", level=logging.ERROR, exc_info=True)
            self._decisions += 1
            self._decide_s += time.perf_counter() - t_cpu
            return now, self._capture
        except BaseException:
            for item in self._capture:  # launched: never leave them waiting
                self._hand_over(item)
            raise
        finally:
            self._capture = None

    def _needs_tick(self) -> bool:
        if self._formed.holding():
            return True  # a lead held for mates starts at its start_by at the latest
        for policy in (*self._draining, self.policy):
            if not policy.time_dependent:
                continue
            for s in range(3):
                if (self._gates.has_free_slot(s) and policy.ready_queue(s)
                        and not policy.at_own_limit(s)):
                    return True
        return False

    def _handle_safely(self, ev: Event) -> None:
        """Handle one event; an internal error fails the request it concerns, not the engine."""
        try:
            self._handle(ev)
        except Exception as exc:  # the dispatcher must survive any single request
            self._note("internal error handling %s event", type(ev).__name__,
                       level=logging.ERROR, exc_info=True)
            if isinstance(ev, RequestEvent):
                self._remove_from_policy(ev.live, self.clock.now())
                self._finish(ev.live, Status.ERROR,
                             f"internal error: {type(exc).__name__}: {exc}")

    def _handle(self, ev: Event) -> None:
        match ev:
            case Prepared(live, state, error):
                self._on_prepared(live, state, error)
            case UnitDone():
                self._on_unit(ev)
            case OutputDone(live, actions, error):
                self._on_output(live, actions, error)
            case Dropped(live):
                self._on_drop(live)
            case Cancelled(robot_id, reason):
                self._on_cancel(robot_id, reason)
            case PolicySwitch(policy, future):
                self._on_policy(policy, future)
            case SwitchesChange(changes, future):
                self._on_switches(changes, future)
            case Wake():
                pass  # the step's decision is what it asks for
            case Stop():
                pass  # the loop ends before it handles a batch with a stop

    def _on_prepared(self, live: LiveRequest, state: object,
                     error: tuple[Status, str] | None) -> None:
        live.state = state
        if error is not None:
            self._finish(live, error[0], error[1])
            return
        if live.drop is not None:
            self._finish(live, *live.drop)
            return
        now = self.clock.now()
        req = live.request
        assert req is not None, "a request is admitted only with its Request"
        try:
            self.policy.add_request(req, now)
        except XInferError as exc:
            self._finish(live, Status.REJECTED, f"invalid request: {exc}")
            return
        live.policy, live.ready_since = self.policy, now

    def _on_unit(self, done: UnitDone) -> None:
        live, stage, t0, t1, error = done.live, done.stage, done.t0, done.t1, done.error
        now = self.clock.now()
        if done.issued <= t0:  # NaN (not known) compares False
            live.timings.lane_ms += (t0 - done.issued) * MS_PER_S
        if stage is Stage.ACTION:
            live.timings.action_batch = done.batch
        self._gates.completed(stage)
        live.running = None
        formed = self._formed.predicted.pop((stage, live.rid), None)
        setattr(live.timings, _STAGE_FIELD[stage], (t1 - t0) * MS_PER_S)
        policy = live.policy
        assert policy is not None
        if error is None:
            self._observe_forward(policy, done, formed, now)
        if error is not None:
            self._remove_from_policy(live, now)
            self._note("request %d (%s): %s raised %s: %s", live.rid, live.robot_id,
                       stage.name, type(error).__name__, error, level=logging.WARNING)
            self._finish(live, Status.ERROR,
                         f"{stage.name.lower()} stage raised {type(error).__name__}: {error}")
            return
        if live.drop is not None:
            self._remove_from_policy(live, now)
            self._finish(live, *live.drop)
            return
        if policy.tracker.record_completion(live.rid, now):
            # The correction is shared: the other policies' tables follow it too.
            for other in (*self._draining, self.policy):
                if other is not policy:
                    other.predictor.apply_correction()
        policy.complete(live.rid, stage, now)
        self.audit.observe_end(live.rid, stage, now)
        if stage is not Stage.ACTION:
            live.ready_since = now
            return
        live.in_output = True
        if self._capture is not None:
            self._capture.append(_Started(live=live, now=now))
        else:
            self._cpu.submit(self._output_task, live)

    def _on_output(self, live: LiveRequest, actions: np.ndarray | None, error: str | None) -> None:
        now = self.clock.now()
        live.in_output = False
        if error is not None:
            self.audit.drop(live.rid)
            self._finish(live, Status.ERROR, error)
            return
        self.audit.observe_output_end(live.rid, now, self.rate_table.h_out)
        if live.drop is not None:
            self._finish(live, *live.drop)
            return
        self._finish(live, Status.OK, "", actions)

    def _on_drop(self, live: LiveRequest) -> None:
        """A request detached by ``submit`` (superseded or shed by backpressure)."""
        if live.future.done():
            return
        if live.state is None and live.policy is None:
            return  # still preparing: finished when preparation reports back
        if live.running is None and not live.in_output and live.policy is not None:
            self._remove_from_policy(live, self.clock.now())
            self._finish(live, *(live.drop or (Status.SHED, "dropped")))
        # else: running or in output: finished at its next stage boundary

    def _on_cancel(self, robot_id: str, reason: str) -> None:
        self.releases.forget(robot_id)
        lives = self._table.take_robot(robot_id)
        for live in lives:
            live.drop = (Status.SHED, f"cancelled: {reason}")
            self._on_drop(live)
        if lives:
            self._note("cancelled %d request(s) of robot %s (%s)", len(lives), robot_id, reason)

    def _note_if_hopeless(self, live: LiveRequest) -> None:
        """Warn once per budget that the device cannot meet it even alone (R_j(0)).

        Such a request expires later than its deadline (:func:`expiry`). At most
        :data:`_HOPELESS_NOTES` budgets are remembered, so a client sending ever-new
        budgets can neither grow the set nor flood the log.
        """
        late_by = live.expires_at - live.deadline
        if not late_by > 0:  # an ordinary expiry, or a refused budget (NaN)
            return
        key = round(live.budget * MS_PER_S)
        with self._hopeless_lock:
            if key in self._hopeless_noted or len(self._hopeless_noted) >= _HOPELESS_NOTES:
                return
            self._hopeless_noted.add(key)
        shed = (f"; shed only {late_by * MS_PER_S:.0f} ms after their deadline"
                if self.config.shed_expired else "")
        self._note("budget %.0f ms (robot %s) is shorter than one request alone on this "
                   "device (%.0f ms predicted): such requests cannot be on time and are "
                   "served late%s", live.budget * MS_PER_S, live.robot_id,
                   late_by * MS_PER_S, shed, level=logging.WARNING)

    def _shed_expired(self, now: float) -> bool:
        """Shed requests whose deadline passed while they waited for a stage.

        A request past its deadline can only be late; under overload, serving it
        would make every request behind it late too. Its robot gets an answer at once
        and sends a fresh request (Eq. 1). Running units are never interrupted.

        A request whose budget is shorter than a request's whole service alone on the
        device expires later (:func:`~xinfer_ros.engine.admission.expiry`, fixed when it
        is submitted): shedding it at its deadline would have its robot send another
        request that cannot be on time either, and throw away the work spent on its
        early stages. On a model slower than every budget (eager π0 on an H200 under
        90 and 400 ms budgets) that churn of ViT and Prefill units let the async engine
        finish almost no request (docs/BENCHMARKS.md 4.5).

        Returns:
            Whether any request was shed.
        """
        shed = [(live, "deadline passed while waiting for a stage")
                for live in self._table.take_expired(now)]
        if self.config.shed_doomed:
            shed += [(live, "predicted to answer after its deadline at the present load")
                     for live in self._table.take_doomed(
                         lambda live: self._predicted_finish(live, now))]
        for live, why in shed:
            live.drop = (Status.SHED, f"{why} (budget {live.budget * MS_PER_S:.0f} ms)")
            self._on_drop(live)
        return bool(shed)

    @staticmethod
    def _predicted_finish(live: LiveRequest, now: float) -> float:
        """When ``live``'s policy predicts its answer at the load running now (s)."""
        policy = live.policy
        if policy is None or live.rid not in policy.requests:
            return -math.inf
        return now + policy.remaining_time(live.rid, now)

    def _on_policy(self, new: Policy, fut: Future[str]) -> None:
        old = self.policy
        if old.requests:
            self._draining.append(old)
        self.policy = new
        self._note("policy switched %s -> %s (%d live requests stay with %s)", old.name,
                   new.name, len(old.requests), old.name)
        fut.set_result(new.name)

    def _on_switches(self, changes: dict[str, bool], fut: Future[EngineConfig]) -> None:
        self.config = replace(self.config, **changes)  # type: ignore[arg-type]
        for policy in (*self._draining, self.policy):
            policy.set_slots(self.config.effective_slots)
        self._gate.enabled = not self.config.cpu_overlap
        self._gates.reconfigure(self.config)
        self._note("switches changed: %s", changes)
        fut.set_result(self.config)

    def _remove_from_policy(self, live: LiveRequest, now: float) -> None:
        self.audit.drop(live.rid)
        policy = live.policy
        if policy is not None and live.rid in policy.requests:
            policy.remove_request(live.rid, now)

    # -- decisions ------------------------------------------------------------------------------
    def _decide(self, now: float) -> None:
        if self.config.shed_expired and self._shed_expired(now):
            now = self.clock.now()  # the policies saw the removals at a later instant
        for old in list(self._draining):
            if not old.requests:
                self._draining.remove(old)
                continue
            self._launch_all(old, old.schedule(now), now)
        self._launch_all(self.policy, self.policy.schedule(now), now)
        if not self._draining:
            self.audit.maybe_sample(self.policy, now)

    def _observe_forward(self, policy: Policy, done: UnitDone,
                         formed: tuple[int, float, float] | None, now: float) -> None:
        """Tell the audit and ``policy`` how a completed unit's forward ran.

        ``formed``: the (size, predicted duration, formation time) of the batch the
        policy formed for it, None when it formed none.
        """
        stage, t0, t1 = done.stage, done.t0, done.t1
        if formed is not None:
            self.batch_audit.record(stage, formed[0], formed[1], t0, t1,
                                    formed=formed[2], seen=now)
            former = batch_former(policy)
            if former is not None:
                former.observe_batch(stage, formed[1], t1 - t0, formed[0])
        policy.observe_forward(stage, t1 - t0, done.batch, now)

    def _launch_all(self, policy: Policy, out: SchedulerOutput, now: float) -> None:
        opening = self._gates.open_round()
        issued: list[Stage] = []
        former = batch_former(policy)
        # The units queued below keep how their policy, after this decision, has lanes
        # take them (a draining policy's own answer, not the current one's).
        spread = policy.spreads_lanes()
        try:
            for launch in out.launches:
                if self._gates.allows(launch.stage, launch.request_id, opening):
                    self._issue(launch, now, opening, formed=former is not None,
                                spread=spread)
                    issued.append(launch.stage)
                else:
                    policy.abort(launch.request_id, now)
        finally:
            # Lane tasks start once the whole decision is queued, so that units launched
            # together can run as one batch; queued units start even if the loop broke.
            if former is not None:
                # Every decision, launches or not: a lane came free, a hold expired.
                self._start_formed(former, now)
            else:
                for s in issued:
                    self._start_unit(s, now)

    def _issue(self, launch: Launch, now: float, opening: bool, *,
               formed: bool = False, spread: bool = False) -> None:
        live: LiveRequest = launch.request.payload
        s = launch.stage
        live.timings.queue_ms += (now - live.ready_since) * MS_PER_S
        live.running = s
        live.model_started = True
        self._gates.issued(s, live.rid, opening)
        if formed:
            self._formed.put(s, live, now)
        else:
            self._waiting.put(s, live, now, spread=spread, limit=launch.batch_limit)

    def _start_formed(self, policy: XInferPolicy, now: float) -> None:
        """Hand free lanes the batches ``policy`` forms of its waiting units (issue 28)."""
        formed = self._formed
        if not len(formed):
            return
        tick = self.config.tick_s
        for s in STAGES:
            for batch in formed.form(s, now, policy, policy.plan_batch, tick):
                self._batch_started(policy, s, batch, now)
                if self._capture is not None:  # started once the step lock is released
                    self._capture.append(_Started(stage=s, now=now, formed=batch))
                else:
                    self._submit_formed(s, batch, now)

    def _submit_formed(self, s: Stage, batch: list[Waiting], now: float) -> None:
        formed = self._formed
        try:
            self._stage_lanes[s].submit(self._units.run_formed, s, batch, now, formed.release)
        except RuntimeError as exc:  # the lanes were shut down: never leave it waiting
            formed.release(s)
            for unit in batch:
                self._events.put(UnitDone(unit.live, s, now, now, exc))

    def _batch_started(self, policy: XInferPolicy, s: Stage, batch: list[Waiting],
                       now: float) -> None:
        """Tell ``policy`` its formed batch starts now (its units stop waiting)."""
        try:
            policy.start_batch(s, [w.live.rid for w in batch], now)
        except Exception as exc:  # a policy bug must not keep a formed batch off its lane
            self._note("batch start not recorded by the policy (%s: %s); the batch runs "
                       "anyway", type(exc).__name__, exc, level=logging.ERROR)

    def _plan_failed(self, exc: BaseException) -> None:
        self._note("batch plan failed (%s: %s); the lane batches in launch order",
                   type(exc).__name__, exc, level=logging.ERROR)

    def _start_unit(self, s: Stage, now: float) -> None:
        """Hand a lane of ``s`` one task: it runs the oldest waiting unit's batch."""
        if self._capture is not None:  # started once the step lock is released
            self._capture.append(_Started(stage=s, now=now))
            return
        self._submit_unit(s, now)

    def _submit_unit(self, s: Stage, now: float) -> None:
        try:
            self._stage_lanes[s].submit(self._units.run, s)
        except RuntimeError as exc:  # the lanes were shut down: never leave it waiting
            for unit in self._waiting.take(s):
                self._events.put(UnitDone(unit.live, s, now, now, exc))

    # -- fast path -----------------------------------------------------------------------------
    def _report(self, ev: WorkerEvent) -> None:
        """A worker thread's event: its step is taken here when the engine is idle, else queued."""
        started = self._try_step(ev)
        if started is None:
            self._events.put(ev)
            return
        for item in started:
            self._hand_over(item)

    def _may_chain(self, live: LiveRequest) -> bool:
        """Whether ``submit`` hands ``live`` to the fast lane.

        A hint read without the step lock: it only chooses the thread that prepares
        ``live``; the step after preparation checks again under the lock.
        """
        return (self.config.fast_path and self.backend.chains_stages
                and not self._fast_broken and self._holds_only(live, running=0))

    def _idle_for(self, ev: WorkerEvent) -> bool:
        """Whether ``ev``'s request is all the engine holds; the caller holds the step lock."""
        live = ev.live
        # A unit that just ended still counts as running until its event is handled.
        return (self._holds_only(live, running=1 if isinstance(ev, UnitDone) else 0)
                and all(rid == live.rid for rid in self.policy.requests))

    def _holds_only(self, live: LiveRequest, running: int) -> bool:
        """Whether a started engine holds nothing but ``live`` and ``running`` units."""
        return (self._thread is not None and not self._halted
                and self._events.pending == 0 and not self._draining
                and sum(self._gates.running) == running and not len(self._waiting)
                and not len(self._formed) and self._table.alone(live))

    def _try_step(self, ev: WorkerEvent) -> list[_Started] | None:
        """Take the dispatcher's step for ``ev`` on this thread if the engine is idle.

        Never waits for the step lock: a dispatcher that holds it has work of its own,
        so the engine is not idle.

        Returns:
            None when the step was not taken (the caller queues ``ev``); else the units
            and output the step started, for the caller to start or run.
        """
        if not self.config.fast_path or not self._step_lock.acquire(blocking=False):
            return None
        try:
            if not self._idle_for(ev):
                return None
            _, started = self._step([ev])
            self._fast_steps += 1
            if self._needs_tick():  # work waits on a slack check: the dispatcher ticks
                self._events.put(Wake())
            return started
        finally:
            self._step_lock.release()

    def _chain_task(self, live: LiveRequest) -> None:
        """The fast lane: ``live`` from preparation to delivery while the engine stays idle."""
        lane = current_lane()
        if lane is not None and lane.setup_error is not None:
            self._fast_broken = True  # the ordinary lanes serve from now on
            self._prepare_task(live)
            return
        pending: list[_Started] = []
        try:
            ev: WorkerEvent | None = self._prepare(live)
            while ev is not None:
                started = self._try_step(ev)
                if started is None:
                    self._events.put(ev)  # busy: the dispatcher continues the request
                    return
                pending = started
                ev = self._run_started(pending)
        except Exception:  # a bug in the chain: the ordinary lanes finish the request
            self._note("fast path failed for request %d", live.rid, level=logging.ERROR,
                       exc_info=True)
            for item in pending:  # launched: never leave them waiting (as _step does)
                self._hand_over(item)

    def _run_started(self, started: list[_Started]) -> WorkerEvent | None:
        """Run a step's one unit or output on this thread; returns its event.

        Anything else (several, or nothing) goes to the ordinary lanes: None. Each item
        is removed from ``started`` before it is used, so that a caller recovering from
        an error hands over only the items nobody took: none runs or reports twice.
        """
        if len(started) != 1:
            while started:
                self._hand_over(started.pop(0))
            return None
        item = started.pop()
        if item.stage is None:
            assert item.live is not None
            return self._output(item.live)
        if item.formed is not None:
            # A batch-forming policy's batch (on an idle engine, the request's one unit):
            # its lane was counted busy when it formed, and is freed before this returns.
            done = self._units.execute_formed(item.stage, item.formed, item.now,
                                              self._formed.release)
        else:
            done = self._units.execute(item.stage)
        self._fast_units += len(done)
        if len(done) == 1:
            return done[0]
        for unit in done:  # a batch mate launched by the dispatcher meanwhile
            self._report(unit)
        return None

    def _runner_broke(self, stage: Stage, units: int) -> None:
        """Log a batch that broke outside the backend (its units fail with the error)."""
        self._note("%s batch of %d unit(s) broke outside the backend; its units fail",
                   stage.name, units, level=logging.ERROR, exc_info=True)

    def _hand_over(self, item: _Started) -> None:
        """Start a captured unit, formed batch or output on its own lane."""
        if item.formed is not None:
            assert item.stage is not None
            self._submit_formed(item.stage, item.formed, item.now)
        elif item.stage is not None:
            self._submit_unit(item.stage, item.now)
        elif item.live is not None:
            self._cpu.submit(self._output_task, item.live)

    # -- results ----------------------------------------------------------------------------------
    def _finish(self, live: LiveRequest, status: Status, reason: str,
                actions: np.ndarray | None = None) -> None:
        self._delivery.finish(live, status, reason, actions)
