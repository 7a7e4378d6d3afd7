"""The scheduling-policy interface that every driver (simulator, engine, ROS node) calls.

Contract (all times are seconds on the driver's clock, passed in explicitly; a policy
never reads the wall clock):

1. Build a policy with ``make_policy(name, slots=(V, P, A), ...)``. ``slots`` are the
   physical execution slots per stage; no policy ever has more units of a stage
   running than its slot count.
2. On a request's server arrival call ``on_arrival(request, t)``. Its ViT becomes ready.
3. On a unit's completion call ``on_complete(request_id, stage, t)``. The next stage
   becomes ready; after Action the request leaves the policy and is listed in
   ``SchedulerOutput.finished``.
4. Periodically (e.g. every 5–10 ms, so that slack that shrinks with time is noticed)
   call ``on_tick(t)``.

Each of these returns a :class:`SchedulerOutput` whose ``launches`` the driver must
start now: the policy already counts them as running from ``t`` (that is what makes
Algorithm 1's refresh-after-every-launch possible). If the driver cannot start one, it
calls ``abort(request_id, t)``, which returns the unit to its ready queue.

Several events at the same instant can be batched: ``add_request`` / ``complete`` /
``abort`` only record; one ``schedule(t)`` then decides. ``on_*`` = record + schedule.
``remove_request(request_id, t)`` drops a request entirely (shed, cancelled, robot
gone), freeing its slot if a unit was running.

Times must not go backwards across calls (a :class:`SchedulerStateError` says so).
A policy object is not thread-safe: call it from one thread (e.g. one ROS executor
callback group) only.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar, TypeAlias, TypedDict

from xinfer_ros.core.constants import DEFAULT_SLOTS
from xinfer_ros.core.errors import InvalidRequestError, SchedulerStateError
from xinfer_ros.core.forecast import ArrivalForecaster
from xinfer_ros.core.predictor import Predictor, ProgressTracker, RunningUnit
from xinfer_ros.core.rate_table import RateTable, default_rate_table
from xinfer_ros.core.request import Request, check_time
from xinfer_ros.core.stages import NUM_STAGES, STAGES, Stage, StageState

__all__ = ["Launch", "Policy", "PolicyOptions", "PolicyParams", "SchedulerOutput", "SlotCounts",
           "parse_slots"]

#: Per-stage counts: ``(V, P, A)`` or a mapping from every stage (a ``Stage``, its
#: index, name or letter) to its count. Mapping keys are invariant, hence one per kind.
SlotCounts: TypeAlias = (Mapping[Stage, int] | Mapping[str, int] | Mapping[int, int]
                         | Sequence[int])


class PolicyOptions(TypedDict, total=False):
    """:class:`Policy` keywords a subclass passes on unchanged (see its Args)."""

    slots: SlotCounts | None
    rate_table: RateTable | None
    forecast_window: float | None


class PolicyParams(PolicyOptions, total=False):
    """Every :class:`Policy` keyword: :class:`PolicyOptions` and ``interference``."""

    interference: bool

#: Tolerated clock regression between calls (float noise in drivers' time arithmetic).
_TIME_EPS = 1e-9


@dataclass(frozen=True, slots=True)
class Launch:
    """Start this request's unit of ``stage`` now.

    Attributes:
        request: the request (its ``payload`` carries the RTC inputs).
        stage: the stage to run.
        t: decision time; the unit counts as running from here.
        protected: True when the request was in the effective protected set H.
        batch_limit: 0 when the unit batches as its lanes take it; k >= 1 when its
            request is tight (``tight_alone``): it runs ahead of the stage's other
            units, in a forward of at most k such units (1: alone).
    """

    request: Request
    stage: Stage
    t: float
    protected: bool = False
    #: Tight (issue 28): ahead of the other units, in a forward of at most this many
    #: tight units; 0: batches as the lanes take it.
    batch_limit: int = 0

    @property
    def request_id(self) -> int:
        """The request's id."""
        return self.request.request_id

    @property
    def robot_id(self) -> str:
        """The robot that sent the request."""
        return self.request.robot_id


@dataclass(frozen=True, slots=True)
class SchedulerOutput:
    """Result of one decision.

    Attributes:
        t: decision time.
        launches: units to start now, in decision order.
        finished: requests whose Action completed since the previous output.
        protected: ids of the effective protected set H after the decision (empty for
            policies without protection).
    """

    t: float
    launches: tuple[Launch, ...] = ()
    finished: tuple[Request, ...] = ()
    protected: frozenset[int] = frozenset()


def parse_slots(slots: SlotCounts | None,
                name: str = "slots") -> tuple[int, int, int]:
    """Normalise per-stage counts given as ``(V, P, A)`` or ``{stage: n}`` (all stages).

    Raises:
        InvalidRequestError: naming the value when a stage is missing or a count is < 1.
    """
    if slots is None:
        return DEFAULT_SLOTS
    if isinstance(slots, Mapping):
        vals: list[object] = [None] * NUM_STAGES
        for k, v in slots.items():
            try:
                vals[Stage.parse(k)] = v
            except ValueError as exc:
                raise InvalidRequestError(f"{name}: {exc}") from None
        lacking = [STAGES[i].name for i, v in enumerate(vals) if v is None]
        if lacking:
            raise InvalidRequestError(f"{name} is missing stage(s) {', '.join(lacking)}: "
                                      f"{dict(slots)!r}")
    else:
        vals = list(slots)
        if len(vals) != NUM_STAGES:
            raise InvalidRequestError(f"{name} needs one count per stage (V, P, A), got {slots!r}")
    counts: list[int] = []
    for s, count in zip(STAGES, vals, strict=True):
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise InvalidRequestError(f"{name}[{s.name}] must be an int >= 1, got {count!r}")
        counts.append(count)
    return (counts[0], counts[1], counts[2])


class Policy(ABC):
    """Shared request/queue/slot bookkeeping; subclasses implement :meth:`_dispatch`.

    Args:
        slots: physical execution slots per stage, ``(V, P, A)`` or a stage mapping.
        rate_table: calibrated table for the predictor (default: the shipped one).
        interference: False predicts with isolated durations (ablation).
        forecast_window: P of the arrival forecaster (s).

    Attributes:
        predictor: the remaining-time model (Eq. 8–10).
        tracker: running units, observed counts n_r, progress (Eq. 9).
        forecaster: per-budget arrival history (fed on every arrival by every policy).
    """

    #: Registry name, e.g. ``"xinfer"``.
    name: ClassVar[str] = ""
    #: Whether decisions can change with the passage of time alone (slack shrinks), so
    #: a driver must call :meth:`on_tick` while work waits. False for policies that
    #: decide only on events (FIFO, EDF); True by default, the safe choice.
    time_dependent: ClassVar[bool] = True

    def __init__(
        self,
        *,
        slots: SlotCounts | None = None,
        rate_table: RateTable | None = None,
        interference: bool = True,
        forecast_window: float | None = None,
    ) -> None:
        self.slots: tuple[int, int, int] = parse_slots(slots)
        table = rate_table if rate_table is not None else default_rate_table()
        self.predictor = Predictor(table, interference=interference)
        self.tracker = ProgressTracker(self.predictor)
        self.forecaster = (ArrivalForecaster() if forecast_window is None
                           else ArrivalForecaster(forecast_window))
        self._requests: dict[int, Request] = {}
        # Per-stage ready queues, request_id -> request, in the order work became ready.
        self._ready: tuple[dict[int, Request], dict[int, Request], dict[int, Request]] = (
            {}, {}, {})
        self._finished: list[Request] = []
        self._now = float("-inf")

    # -- event API ------------------------------------------------------------------------
    def on_arrival(self, request: Request, t: float) -> SchedulerOutput:
        """Record a server arrival at ``t`` and decide."""
        self.add_request(request, t)
        return self.schedule(t)

    def on_complete(self, request_id: int, stage: Stage | int, t: float) -> SchedulerOutput:
        """Record that ``request_id``'s unit of ``stage`` completed at ``t`` and decide."""
        self.complete(request_id, stage, t)
        return self.schedule(t)

    def on_tick(self, t: float) -> SchedulerOutput:
        """Periodic decision at ``t`` (no new event)."""
        return self.schedule(t)

    def schedule(self, t: float) -> SchedulerOutput:
        """Decide at ``t``: pick units to launch, mark them running, return them."""
        t = self._advance_clock(t)
        launches = self._dispatch(t)
        finished = tuple(self._finished) if self._finished else ()
        self._finished.clear()
        return SchedulerOutput(t, tuple(launches), finished, self._protected_ids())

    # -- recording without deciding ---------------------------------------------------------
    def add_request(self, request: Request, t: float) -> None:
        """Register a freshly arrived request (ViT ready, later stages waiting).

        Raises:
            SchedulerStateError: duplicate id, or the request is not fresh.
        """
        t = self._advance_clock(t)
        rid = request.request_id
        if rid in self._requests:
            raise SchedulerStateError(f"request id {rid} is already live")
        if request.cursor != 0 or request.states[0] is not StageState.READY:
            raise SchedulerStateError(f"request {rid} must arrive with ViT ready, "
                                      f"got states {[s.value for s in request.states]}")
        self._requests[rid] = request
        self._ready[0][rid] = request
        self.forecaster.observe(request.arrival, request.budget)
        self._on_added(request, t)

    def complete(self, request_id: int, stage: Stage | int, t: float) -> Request:
        """Record a unit completion without deciding; returns the request.

        Raises:
            SchedulerStateError: the request has no running unit of ``stage``.
        """
        t = self._advance_clock(t)
        unit = self.tracker.units.get(request_id)
        s = Stage(stage)
        if unit is None or unit.stage != s:
            running = "nothing" if unit is None else unit.stage.name
            raise SchedulerStateError(f"completion of {s.name} for request {request_id}, "
                                      f"which runs {running}")
        self.tracker.finish(request_id, t)
        req = unit.request
        req.states[s] = StageState.DONE
        req.finished[s] = t
        req.cursor = s + 1
        if s < Stage.ACTION:
            req.states[s + 1] = StageState.READY
            self._ready[s + 1][request_id] = req
        else:
            del self._requests[request_id]
            self._finished.append(req)
            self._on_removed(req)
        return req

    def observe_forward(self, stage: Stage | int, duration: float, batch: int,  # noqa: B027
                        t: float) -> None:
        """Hook: a unit of ``stage`` ran ``duration`` s in a forward of ``batch`` units.

        The engine reports every completed unit's forward, whichever policy formed it,
        with ``t`` its completion; policies that learn from forwards override this.
        """

    def at_own_limit(self, stage: Stage | int) -> bool:
        """Whether the policy launches no more ``stage`` units until one ends, slots aside.

        A driver ticks a time-dependent policy while ready work waits beside a free
        slot, since its slack checks may pass later. A policy whose own launch limit
        (below the slots) is reached launches again only after an event that brings a
        decision anyway (a completion frees a unit's place; an arrival may raise the
        limit). Ticking it meanwhile only costs dispatcher time, which on a CPU engine
        the lanes share. Default: no limit of its own.
        """
        return False

    def spreads_lanes(self) -> bool:
        """Whether a lane now takes only its share of its stage's waiting units.

        Drivers whose lanes batch launched units (the engine's ``BatchQueue``, the
        simulator's batched GPU) ask after each decision. False (the default): a free
        lane takes the oldest waiting unit and up to ``max_batch − 1`` mates, so units
        launched together run as one forward. True: it takes ``ceil(waiting / lanes)``
        of them (at most ``max_batch``), so units launched together spread over the
        stage's lanes and only a backlog longer than the lanes forms batches.
        """
        return False

    def abort(self, request_id: int, t: float) -> None:
        """The driver could not start a launched unit: put it back into its ready queue."""
        t = self._advance_clock(t)
        unit = self.tracker.units.get(request_id)
        if unit is None:
            raise SchedulerStateError(f"abort: request {request_id} has no running unit")
        self.tracker.finish(request_id, t)
        req = unit.request
        req.states[unit.stage] = StageState.READY
        req.issued[unit.stage] = None
        self._ready[unit.stage][request_id] = req

    def remove_request(self, request_id: int, t: float) -> Request:
        """Drop a live request (shed/cancel), freeing its running slot if any."""
        t = self._advance_clock(t)
        req = self._requests.pop(request_id, None)
        if req is None:
            raise SchedulerStateError(f"remove: request {request_id} is not live")
        if request_id in self.tracker.units:
            self.tracker.finish(request_id, t)
        for q in self._ready:
            q.pop(request_id, None)
        self._on_removed(req)
        return req

    def set_slots(self, slots: SlotCounts) -> None:
        """Change the physical slots; running units above a new limit finish normally."""
        self.slots = parse_slots(slots)

    # -- introspection --------------------------------------------------------------------
    @property
    def requests(self) -> Mapping[int, Request]:
        """Live requests by id (read-only view by convention)."""
        return self._requests

    def ready_queue(self, stage: Stage | int) -> tuple[Request, ...]:
        """Ready requests of ``stage`` in the order they became ready."""
        return tuple(self._ready[stage].values())

    def running_units(self) -> tuple[RunningUnit, ...]:
        """Units counted as running."""
        return tuple(self.tracker.units.values())

    @property
    def running_counts(self) -> tuple[int, int, int]:
        """n_r = (n_V, n_P, n_A): units counted as running."""
        c = self.tracker.counts
        return (c[0], c[1], c[2])

    def free_slots(self, stage: Stage | int) -> int:
        """Slots of ``stage`` not occupied by a running unit."""
        return self.slots[stage] - self.tracker.counts[stage]

    def remaining_time(self, request_id: int, t: float, n: Sequence[int] | None = None) -> float:
        """R_j(n) for a live request (default n: the observed running counts)."""
        return self.tracker.remaining(self._requests[request_id], t,
                                      self.tracker.counts if n is None else n)

    @property
    def now(self) -> float:
        """Time of the latest call."""
        return self._now

    # -- for subclasses ---------------------------------------------------------------------
    @abstractmethod
    def _dispatch(self, t: float) -> list[Launch]:
        """Choose and :meth:`_issue` units at ``t``; return the launches in order."""

    def _issue(self, req: Request, stage: Stage, t: float, protected: bool = False) -> Launch:
        """Move ``req``'s ready unit of ``stage`` to running at ``t``."""
        del self._ready[stage][req.request_id]
        req.states[stage] = StageState.RUNNING
        req.issued[stage] = t
        self.tracker.start(req, stage, t)
        return Launch(req, stage, t, protected)

    def _protected_ids(self) -> frozenset[int]:
        return frozenset()

    def _on_added(self, request: Request, t: float) -> None:  # noqa: B027 - optional hook
        """Hook: a request arrived."""

    def _on_removed(self, request: Request) -> None:  # noqa: B027 - optional hook
        """Hook: a request left the live set (finished or removed)."""

    def _advance_clock(self, t: float) -> float:
        if t.__class__ is not float or t - t != 0.0:  # fast path: a finite float
            t = check_time("t", t)
        if t < self._now - _TIME_EPS:
            raise SchedulerStateError(f"time went backwards: t={t!r} after {self._now!r}")
        self._now = max(self._now, t)
        return t
