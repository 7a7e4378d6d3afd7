"""Value types of the engine's public API: configuration, statuses, results.

Everything here is plain data so that a ROS node can translate it to and from
messages (``ActionChunk.status`` uses the same four codes as :class:`Status`).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace
from enum import Enum, IntEnum
from typing import Any

import numpy as np

from xinfer_ros.core.batching import lanes_for
from xinfer_ros.core.constants import DEFAULT_SLOTS, DELTA, MAX_LIVE_REQUESTS, POLICY_TICK
from xinfer_ros.core.phase_spread import PHASE_SPREAD_MARGIN
from xinfer_ros.core.saturation import BATCH_WHEN
from xinfer_ros.core.xinfer_policy import check_lazy_slots

__all__ = [
    "TABLE6",
    "EngineConfig",
    "EngineResult",
    "ExecMode",
    "Overflow",
    "StageTimings",
    "Status",
    "ablation_config",
    "mode_config",
]


class Status(IntEnum):
    """Outcome of a request; the values match ``xinfer_ros/ActionChunk`` STATUS_*."""

    OK = 0
    #: Refused before any model work: failed validation, or backpressure refused it.
    REJECTED = 1
    #: Dropped after admission: shed by backpressure, superseded, or its robot cancelled.
    SHED = 2
    #: A stage raised; the reason carries the exception text.
    ERROR = 3


class ExecMode(str, Enum):
    """Execution presets of the engine benchmark (paper §6.4, Table 6).

    ``ASYNC`` is the full engine (M+C+R+G): intra-stage concurrency, CPU overlap,
    no round barrier, Context/Action overlap. ``SERIAL`` is All-Off: one model unit at
    a time, CPU work not overlapped, round barrier. ``LOCKSTEP`` keeps M, C and G
    but restores the round barrier (Robion-like rounds: Context of cohort g overlaps
    Action of cohort g−1).
    """

    ASYNC = "async"
    SERIAL = "serial"
    LOCKSTEP = "lockstep"


class Overflow(str, Enum):
    """What ``submit`` does when ``max_live`` requests are already live."""

    #: Refuse the new request (status REJECTED, reason names the bound).
    REJECT = "reject"
    #: Shed the live request with the earliest deadline that has not started model
    #: work; refuse the new one when every live request already runs model work.
    SHED_OLDEST = "shed_oldest"


@dataclass(frozen=True)
class EngineConfig:
    """Run-time configuration of :class:`~xinfer_ros.engine.engine.StageEngine`.

    The four ablation switches follow Appendix B.4: ``intra_stage`` (M),
    ``cpu_overlap`` (C), ``round_barrier`` (the inverse of R) and ``cross_stage`` (G).

    Attributes:
        slots: physical execution slots per stage (V, P, A); with ``intra_stage``
            off every stage gets one slot.
        max_live: bound on live requests (preparing, queued, running, finishing);
            ``submit`` beyond it follows ``overflow``.
        overflow: backpressure behaviour, see :class:`Overflow`.
        supersede: a robot's new request sheds its still-live older one (a robot has
            at most one request in flight, Eq. 1).
        shed_expired: a request whose deadline passed while it waited for a stage is
            shed (status SHED) instead of being served late; its robot gets an answer
            at once and can send a fresh request. Running units are not interrupted.
            A budget shorter than a request's service alone (R_j(0)) counts from the
            earliest answer the device allows, i.e. R_j(0) later.
        shed_doomed: with ``shed_expired``, a request waiting for a stage is also shed
            as soon as the policy's predictor puts its answer past that expiry at the
            load running now (``now + R_j(n)``, no queueing counted): it would be shed
            at a later stage boundary anyway, after its early stages had slowed the
            units of requests that can still be on time. Under overload a slack-ordered
            policy otherwise launches the requests nearest their deadlines first.
        cpu_workers: threads of the CPU pool (preparation and output processing).
        intra_stage: M: more than one unit of a stage may run at once.
        cpu_overlap: C: CPU preparation/output may overlap model work.
        round_barrier: lockstep rounds: no new round starts before every unit of the
            current round completed (completed responses still return at once).
        cross_stage: G: Context (ViT/Prefill) and Action lanes may run together.
        tick_s: period of policy ticks (s), so shrinking slack is noticed.
        sample_period_s: minimum spacing of running-stage prediction samples
            (App. C.2), 0 disables sampling.
        rate_correction: learn per-stage slowdown factors of the calibrated rates
            from completed units (:mod:`xinfer_ros.core.rate_correction`), shared by
            every policy of the engine; off keeps the calibrated predictions exactly.
        delta: δ, the time reserved outside the server (s): a request's deadline is
            its arrival plus its budget less ``delta``, and a published response
            brings its robot's next request about ``delta`` later.
        phase_spread: OK results ready later than ``T_E`` after their arrival get a
            release time that keeps the robots' send phases apart
            (:mod:`xinfer_ros.core.phase_spread`); the caller publishes each result at
            its ``release_at``. Off: every result is released when it is ready.
        phase_spread_margin: held results are released at least this long before
            their deadline (s).
        max_batch: most units of one stage that run as one batched forward. Above 1,
            each stage gets ``ceil(slots / max_batch)`` lanes and a lane that comes
            free runs the launched units waiting for it (up to ``max_batch`` of one
            batch key) as one batch, or, under a batch-forming policy
            (``xinfer_batch``), the units its plan chooses; the rate table should then
            be calibrated with the same ``max_batch``. 1: one unit per lane, as in the
            paper.
        fast_path: at low load, skip the dispatcher's thread hand-offs. While the
            engine is idle (one live request, nothing else queued, running or
            pending, no draining policy), the thread that finishes a step of that
            request takes the dispatcher's next step itself (the same policy calls,
            under the dispatcher's lock), and where the backend allows
            (:attr:`~xinfer_ros.engine.backends.base.Backend.chains_stages`) the
            request runs from preparation to output on one lane of its own. Work that
            arrives mid-chain hands the request back to the dispatcher at its next
            stage boundary. Off: every step goes through the dispatcher thread.
        lazy_slots: an XInfer policy given by name gets this ``lazy_slots`` (see
            :class:`~xinfer_ros.core.xinfer_policy.XInferPolicy`): ``"stage"`` or
            ``"device"``, a stage's (the device's) spare slots go only to requests
            whose slack cannot wait for the running units. For a device where
            concurrent units slow each other down (a CPU). Other policies have no
            slack to judge by: they fill every free slot, and the engine logs a
            warning saying so. ``"off"``: the paper's use of the slots.
        batch_when: with ``max_batch`` above 1, when an XInfer policy given by name
            lets its lanes batch. ``"always"``: whenever launched units wait (lane
            batching). ``"saturated"``: only while a meter reads unbatched serving
            saturated, else one unit per lane as unbatched XInfer decides
            (``saturation_switch``, issue 28; the policy ``xinfer_batch_switch``).
            Presets that form their own batches, and the other policies, batch as
            they always do (the engine logs a note for a policy it cannot switch).
    """

    slots: tuple[int, int, int] = DEFAULT_SLOTS
    max_live: int = MAX_LIVE_REQUESTS
    overflow: Overflow = Overflow.REJECT
    supersede: bool = True
    shed_expired: bool = True
    shed_doomed: bool = False
    cpu_workers: int = 2
    intra_stage: bool = True
    cpu_overlap: bool = True
    round_barrier: bool = False
    cross_stage: bool = True
    tick_s: float = POLICY_TICK
    sample_period_s: float = 0.020
    rate_correction: bool = True
    delta: float = DELTA
    phase_spread: bool = False
    phase_spread_margin: float = PHASE_SPREAD_MARGIN
    max_batch: int = 1
    fast_path: bool = True
    lazy_slots: str = "off"
    batch_when: str = "always"

    def __post_init__(self) -> None:
        if len(self.slots) != 3 or any(int(s) < 1 for s in self.slots):
            raise ValueError(f"slots must be three counts >= 1, got {self.slots!r}")
        object.__setattr__(self, "slots", tuple(int(s) for s in self.slots))
        if self.max_live < 1:
            raise ValueError(f"max_live must be >= 1, got {self.max_live!r}")
        if self.cpu_workers < 1:
            raise ValueError(f"cpu_workers must be >= 1, got {self.cpu_workers!r}")
        if self.max_batch < 1:
            raise ValueError(f"max_batch must be >= 1, got {self.max_batch!r}")
        if self.shed_doomed and not self.shed_expired:
            raise ValueError("shed_doomed needs shed_expired: without it no waiting request "
                             "is shed at all")
        check_lazy_slots(self.lazy_slots)
        if self.batch_when not in BATCH_WHEN:
            raise ValueError(f"batch_when must be one of {', '.join(BATCH_WHEN)}, "
                             f"got {self.batch_when!r}")
        if not (self.tick_s > 0 and math.isfinite(self.tick_s)):
            raise ValueError(f"tick_s must be > 0, got {self.tick_s!r}")
        for name in ("delta", "phase_spread_margin"):
            value = getattr(self, name)
            if not (value >= 0 and math.isfinite(value)):
                raise ValueError(f"{name} must be a finite number >= 0 s, got {value!r}")
        object.__setattr__(self, "overflow", Overflow(self.overflow))

    @property
    def effective_slots(self) -> tuple[int, int, int]:
        """Slots after the M switch: one per stage without intra-stage concurrency."""
        return self.slots if self.intra_stage else (1, 1, 1)

    def lanes(self, stage: int) -> int:
        """Lanes that run units of ``stage``: one per slot, one per batch with batching."""
        return lanes_for(self.slots[stage], self.max_batch)

    def action_worker_note(self, processes: int) -> str | None:
        """Why Action worker processes do not match the Action lanes, or None if they do.

        An Action lane without its own process queues behind a busy worker while the
        predictor counts its units as running; fewer lanes than processes leave some idle.
        """
        lanes = self.lanes(2)
        if not processes or lanes == processes:
            return None
        return (f"{lanes} Action lane(s) ({self.slots[2]} slots, batches of up to "
                f"{self.max_batch}) but {processes} Action process(es); one process per "
                f"lane serves and predicts best")

    @property
    def serial_device(self) -> bool:
        """True when at most one model unit may run at a time (no M, no G)."""
        return not self.intra_stage and not self.cross_stage

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        d = asdict(self)
        d["overflow"] = self.overflow.value
        d["slots"] = list(self.slots)
        return d


#: Table 6 / App. B.4 configurations: name -> (intra_stage M, cpu_overlap C,
#: barrier removed R, cross_stage G). All-Off serialises stages and keeps the barrier.
TABLE6: dict[str, tuple[bool, bool, bool, bool]] = {
    "all-off": (False, False, False, False),
    "M": (True, False, False, False),
    "M+C": (True, True, False, False),
    "M+R": (True, False, True, False),
    "M+G": (True, False, False, True),
    "M+C+R+G": (True, True, True, True),
}


def ablation_config(name: str, base: EngineConfig | None = None) -> EngineConfig:
    """``base`` with the switches of a Table 6 configuration (see :data:`TABLE6`).

    Raises:
        ValueError: on an unknown name.
    """
    if name not in TABLE6:
        raise ValueError(f"unknown ablation {name!r}; choose one of {', '.join(TABLE6)}")
    m, c, r, g = TABLE6[name]
    cfg = base if base is not None else EngineConfig()
    return replace(cfg, intra_stage=m, cpu_overlap=c, round_barrier=not r, cross_stage=g)


def mode_config(mode: ExecMode | str, base: EngineConfig | None = None) -> EngineConfig:
    """Return ``base`` (default config) with the switches of a benchmark preset.

    Raises:
        ValueError: on an unknown mode name.
    """
    m = ExecMode(mode)
    cfg = base if base is not None else EngineConfig()
    if m is ExecMode.ASYNC:
        return replace(cfg, intra_stage=True, cpu_overlap=True, round_barrier=False,
                       cross_stage=True)
    if m is ExecMode.SERIAL:
        return replace(cfg, intra_stage=False, cpu_overlap=False, round_barrier=True,
                       cross_stage=False)
    return replace(cfg, intra_stage=True, cpu_overlap=True, round_barrier=True,
                   cross_stage=True)


@dataclass
class StageTimings:
    """Per-request server timings in milliseconds (NaN when the step did not run).

    ``queue_ms`` sums the waits inside the server before work is handed out: for a CPU
    worker before preparation and output, and in the policy's ready queues before each
    model unit is launched. ``lane_ms`` sums the waits after a launch, for a lane (a
    busy lane, a batch held for mates) until the unit's forward starts.
    """

    prepare_ms: float = math.nan
    queue_ms: float = 0.0
    vit_ms: float = math.nan
    prefill_ms: float = math.nan
    action_ms: float = math.nan
    output_ms: float = math.nan
    total_ms: float = math.nan
    lane_ms: float = 0.0
    #: Units in the Action forward the request ran in (0: its Action did not run).
    action_batch: int = 0

    def to_dict(self) -> dict[str, float]:
        """JSON-ready form."""
        return asdict(self)


@dataclass
class EngineResult:
    """What ``submit``'s callback / future receives.

    Attributes:
        request_id: engine-assigned id.
        robot_id: the submitting robot.
        status: outcome.
        reason: empty for OK, otherwise why not.
        actions: ``(H, D)`` float64 chunk in robot units when OK, else None.
        timings: per-stage server timings.
        budget_ms: the budget the request carried.
        submitted: engine-clock submit time (s).
        finished: engine-clock completion time (s): the result is ready.
        arrival: engine-clock time the request reached the server (s); ``submit``'s
            ``age`` earlier than ``submitted``.
        deadline: the request's deadline ``arrival + b - δ`` (engine clock, s); NaN
            when its budget was refused.
        release_at: when to publish the result (engine clock, s): ``finished``, or
            later for an OK result that phase spreading holds (never past
            ``deadline`` less the configured margin).
        emulated: True when produced by the emulated backend (placeholder actions).
        meta: backend extras (e.g. seed).
    """

    request_id: int
    robot_id: str
    status: Status
    reason: str = ""
    actions: np.ndarray | None = None
    timings: StageTimings = field(default_factory=StageTimings)
    budget_ms: float = math.nan
    submitted: float = math.nan
    finished: float = math.nan
    arrival: float = math.nan
    deadline: float = math.nan
    release_at: float = math.nan
    emulated: bool = False
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """True when the chunk is usable."""
        return self.status is Status.OK

    @property
    def hold_s(self) -> float:
        """How long the result is held after it is ready (s); 0 when released at once."""
        hold = self.release_at - self.finished
        return hold if hold > 0 else 0.0

    @property
    def latency_ms(self) -> float:
        """Server latency (submit to completion) in ms."""
        return (self.finished - self.submitted) * 1e3
