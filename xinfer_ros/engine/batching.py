"""Launched units waiting for a lane, taken by the lanes in batches (issue 16, item 3).

The dispatcher puts every unit the policy launched here and hands its lane group one
task per unit. A lane task takes the oldest waiting unit of its stage and, when the
backend can stack states, up to ``max_batch − 1`` more of the same batch key, and runs
them as one forward. Units launched in the same decision thus run together, and so do
units that waited behind busy lanes (with batching each stage has fewer lanes than
slots). A unit launched by a policy that spreads lanes (``Policy.spreads_lanes``, asked
at its launch) instead leads a batch of only ``ceil(waiting / lanes)`` units, so units
launched together use every lane of their stage before any of them share one. With
``max_batch = 1`` each task takes one unit, the paper's engine. Units of
different keys (a robot with a camera missing, say) run in separate batches: they queue
for the stage's ``ceil(slots / max_batch)`` lanes while the policy counts them running.

Every task finds either work or an empty queue: there are as many tasks as units, and
a task never takes fewer than one waiting unit.

A policy that forms its own batches (``plan_batch``, the ``xinfer_batch`` policy of issue
28) does not go through that queue: its units wait in :class:`FormedBatches`, where the
dispatcher, which owns the policy, asks it which units a free lane runs and whether the
lane should hold its lead for mates, and hands the lane the formed batch
(:meth:`UnitRunner.run_formed`).
"""

from __future__ import annotations

import math
import threading
from collections import deque
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeAlias

from xinfer_ros.core.batch_formation import BatchPlan
from xinfer_ros.core.batching import next_batch_size, take_tight, tight_end
from xinfer_ros.core.stages import STAGES, Stage
from xinfer_ros.engine.clock import Clock
from xinfer_ros.engine.events import UnitDone
from xinfer_ros.engine.lanes import LaneInfo, SharedExclusiveGate, current_lane

if TYPE_CHECKING:
    from xinfer_ros.engine.admission import LiveRequest
    from xinfer_ros.engine.backends.base import AnyBackend

__all__ = ["BatchCounts", "BatchQueue", "BatchSizes", "FormedBatches", "Planner", "UnitRunner",
           "Waiting"]

#: ``plan(stage, request ids oldest first, t)``: the batch-forming policy's plan for a
#: free lane (:meth:`~xinfer_ros.core.xinfer_policy.XInferPolicy.plan_batch`).
Planner = Callable[[Stage, Sequence[int], float], BatchPlan]
#: ``key(stage, live)``: a unit's batch key, None when it runs alone.
BatchKey = Callable[[Stage, "LiveRequest"], Hashable | None]


def _same_key(first: Waiting, unit: Waiting) -> bool:
    """Whether ``unit`` may share ``first``'s forward: a key, and the same one."""
    return first.key is not None and unit.key == first.key


def _batch_key(key: BatchKey, stage: Stage, live: LiveRequest) -> Hashable | None:
    """``key(stage, live)``; None (run alone, and fail there) for a state it cannot key."""
    try:
        return key(stage, live)
    except Exception:
        return None


@dataclass(frozen=True, slots=True)
class Waiting:
    """One launched unit waiting for a lane.

    Attributes:
        live: the engine's request record.
        issued: engine time the policy launched the unit.
        key: its batch key (None: it runs alone).
        spread: whether its policy spread lanes when it was queued.
        limit: 0, or (a tight unit, ``Launch.batch_limit``) the most units of its
            forward, all tight.
    """

    live: LiveRequest
    issued: float
    key: Hashable | None = None
    #: Whether its policy spread lanes when it launched: a batch it leads takes its share.
    spread: bool = False
    #: Tight (``Launch.batch_limit``): queued ahead of the others, batched with tight
    #: units only, at most this many; 0: an ordinary unit.
    limit: int = 0


class BatchQueue:
    """Launched units per stage, in launch order; thread-safe.

    Args:
        max_batch: most units one lane task takes (>= 1).
        key: ``key(stage, live)``: the unit's batch key, None when it runs alone.
        lanes: lanes per stage (V, P, A), which :attr:`spread` divides the waiting
            units by; None: one each.
    """

    def __init__(self, max_batch: int, key: BatchKey,
                 lanes: Sequence[int] | None = None) -> None:
        if max_batch < 1:
            raise ValueError(f"max_batch must be >= 1, got {max_batch!r}")
        lanes = (1,) * len(STAGES) if lanes is None else tuple(lanes)
        if len(lanes) != len(STAGES) or min(lanes) < 1:
            raise ValueError(f"lanes must be {len(STAGES)} counts >= 1, got {lanes!r}")
        self.max_batch = max_batch
        self._key = key
        self._lanes = lanes
        self._lock = threading.Lock()
        self._waiting: dict[Stage, deque[Waiting]] = {s: deque() for s in STAGES}

    def put(self, stage: Stage, live: LiveRequest, issued: float, *,
            spread: bool = False, limit: int = 0) -> None:
        """Queue a launched unit, with its batch key (the caller's thread computes it).

        ``spread``: whether its policy spread lanes when it launched the unit
        (``Policy.spreads_lanes``); the unit keeps it, so a later decision, or another
        policy's, does not change how it batches. ``limit`` (``Launch.batch_limit``): a
        tight unit, queued behind the other tight units but ahead of every ordinary
        one, so the stage's next free lane takes it, with tight mates only and at most
        ``limit`` units in all.
        """
        key = _batch_key(self._key, stage, live) if self.max_batch > 1 else None
        unit = Waiting(live, issued, key, spread, limit)
        with self._lock:
            waiting = self._waiting[stage]
            if limit:
                waiting.insert(tight_end(waiting), unit)
            else:
                waiting.append(unit)

    def take(self, stage: Stage) -> list[Waiting]:
        """The first waiting unit of ``stage`` and its batch mates (empty if none wait).

        Tight units (``limit``) wait first, in launch order, then the others in theirs.
        Mates share the first unit's batch key; units of other keys keep their place.
        A tight unit's mates are tight units, and the batch holds no more units than
        any member's limit.
        When the oldest unit was queued spreading, at most ``ceil(waiting / lanes)``
        units: with no more units waiting than lanes, each runs alone. Every waiting
        unit of the stage and all its lanes count, busy or not (the simulator's batched
        GPU divides the same way), so a backlog left from batching drains in even shares.
        """
        with self._lock:
            waiting = self._waiting[stage]
            if not waiting:
                return []
            if waiting[0].limit:
                return take_tight(waiting, self.max_batch, _same_key)[0]
            size = next_batch_size(len(waiting), self.max_batch, self._lanes[stage],
                                   spread=waiting[0].spread)
            first = waiting.popleft()
            batch = [first]
            if first.key is None:
                return batch
            kept: deque[Waiting] = deque()
            while waiting and len(batch) < size:
                unit = waiting.popleft()
                (batch if unit.key == first.key else kept).append(unit)
            kept.extend(waiting)
            self._waiting[stage] = kept
            return batch

    def __len__(self) -> int:
        with self._lock:
            return sum(len(q) for q in self._waiting.values())


class FormedBatches:
    """Units of a batch-forming policy, formed into batches by its plan (issue 28).

    Dispatcher-owned, except :meth:`release`, which a lane calls when its batch ends.
    After every decision the dispatcher calls :meth:`form` for each stage: while a lane
    of the stage is free, the policy plans the batch of the waiting units of one batch
    key (oldest unit's key first), and the plan's members leave together for that lane.
    A plan that holds its lead for mates (``start_by`` after now) keeps a lane free for
    it, and the units of its key wait with it. A later decision plans again: a mate the
    policy launched meanwhile joins at once, and the lead starts at the first
    ``start_by`` it was given at the latest (a re-plan never moves that later, though a
    plan made later would allow a later start). A hold shorter than ``min_hold`` starts
    now instead, so that a dispatcher deciding at least every ``min_hold`` while
    :meth:`holding` keeps that bound.

    Units without a batch key run alone, at once, in their turn. Units of several
    policies (after a policy switch) share the lanes; each policy forms its own.

    Args:
        lanes: lanes per stage.
        max_batch: most units of one batch (a plan that raised falls back to this many).
        key: ``key(stage, live)``: the unit's batch key.
        on_plan_error: told of a plan that raised; the lead and its oldest mates then
            run as the lanes would batch them, so that no unit waits forever.
    """

    def __init__(self, lanes: Sequence[int], max_batch: int, key: BatchKey,
                 on_plan_error: Callable[[BaseException], None]) -> None:
        if max_batch < 1:
            raise ValueError(f"max_batch must be >= 1, got {max_batch!r}")
        self.lanes = tuple(lanes)
        self.max_batch = max_batch
        self._key = key
        self._on_plan_error = on_plan_error
        self._waiting: dict[Stage, list[Waiting]] = {s: [] for s in STAGES}
        self._lock = threading.Lock()
        self._busy = [0, 0, 0]
        #: Held leads per stage: request id -> start_by of the lead's first hold.
        self._held: dict[Stage, dict[int, float]] = {s: {} for s in STAGES}
        #: Formed batches now on a lane: (stage, first unit's request id) -> (size, the
        #: plan's predicted duration in s, when it was formed). The dispatcher pops an
        #: entry when that unit ends (:class:`~xinfer_ros.core.batch_audit.BatchAudit`),
        #: so it holds at most one entry per lane.
        self.predicted: dict[tuple[Stage, int], tuple[int, float, float]] = {}

    def put(self, stage: Stage, live: LiveRequest, issued: float) -> None:
        """Queue a launched unit with its batch key."""
        self._waiting[stage].append(Waiting(live, issued, _batch_key(self._key, stage, live)))

    def holding(self) -> bool:
        """Whether a lead waits for mates (the dispatcher must decide again soon)."""
        return any(self._held.values())

    def free(self, stage: Stage) -> int:
        """Lanes of ``stage`` that run no formed batch."""
        with self._lock:
            return self.lanes[stage] - self._busy[stage]

    def release(self, stage: Stage) -> None:
        """A formed batch of ``stage`` ended: its lane is free (any thread)."""
        with self._lock:
            self._busy[stage] -= 1

    def __len__(self) -> int:
        return sum(len(q) for q in self._waiting.values())

    def form(self, stage: Stage, now: float, owner: object, plan: Planner,
             min_hold: float) -> list[list[Waiting]]:
        """The batches of ``owner``'s units that start now on free lanes of ``stage``.

        The caller must hand each returned batch to a lane (or :meth:`release` its lane).

        Args:
            stage: the stage.
            now: decision time.
            owner: the policy whose units are formed (their ``live.policy``).
            plan: its :data:`Planner`.
            min_hold: shortest hold worth keeping (s): the dispatcher's tick.
        """
        waiting = self._waiting[stage]
        held = self._held[stage]
        if not waiting:
            held.clear()
            return []
        free = self.free(stage)
        # A lead keeps its first start_by while it waits (a busy lane, a changed plan).
        holds = {w.live.rid: held[w.live.rid] for w in waiting if w.live.rid in held}
        batches: list[list[Waiting]] = []
        for units in _groups(waiting, owner):
            group = units
            while group and free > 0:
                free -= 1  # taken by the batch, or kept free for a held lead
                if group[0].key is None:
                    batches.append(group)
                    break
                members, start_by, duration = self._plan(stage, group, now, plan)
                lead = members[0]
                start_by = min(start_by, held.get(lead, math.inf))
                if start_by - now >= min_hold:
                    holds[lead] = start_by
                    break
                chosen = set(members)
                batch = [w for w in group if w.live.rid in chosen]
                self.predicted[(stage, batch[0].live.rid)] = (len(batch), duration, now)
                batches.append(batch)
                group = [w for w in group if w.live.rid not in chosen]
        if batches:
            started = {w.live.rid for batch in batches for w in batch}
            self._waiting[stage] = [w for w in waiting if w.live.rid not in started]
            for rid in started:
                holds.pop(rid, None)
            with self._lock:
                self._busy[stage] += len(batches)
        self._held[stage] = holds
        return batches

    def _plan(self, stage: Stage, group: list[Waiting], now: float,
              plan: Planner) -> tuple[Sequence[int], float, float]:
        """The plan's members (lead first, all from ``group``), ``start_by`` and duration.

        The duration is NaN when the plan raised (the fallback has no prediction).
        """
        ids = [w.live.rid for w in group]
        try:
            got = plan(stage, ids, now)
            members: Sequence[int] = got.members
            if not members or not set(members) <= set(ids) or len(members) > self.max_batch:
                raise ValueError(f"plan_batch chose {members!r} from the waiting "
                                 f"{stage.name} units {ids!r} (max_batch {self.max_batch})")
            return members, got.start_by, float(got.duration)
        except Exception as exc:  # a policy bug must not leave units waiting forever
            self._on_plan_error(exc)
            return ids[:self.max_batch], now, math.nan


def _groups(waiting: list[Waiting], owner: object) -> list[list[Waiting]]:
    """``owner``'s units by batch key, in order of each key's oldest unit.

    A unit without a key is a group of its own.
    """
    groups: list[list[Waiting]] = []
    by_key: dict[Hashable, list[Waiting]] = {}
    for w in waiting:
        if w.live.policy is not owner:
            continue
        if w.key is None:
            groups.append([w])
            continue
        group = by_key.get(w.key)
        if group is None:
            group = by_key[w.key] = []
            groups.append(group)
        group.append(w)
    return groups


#: Batches by stage name (lower case) and size (a string, as JSON keys are).
BatchCounts: TypeAlias = dict[str, dict[str, int]]


class BatchSizes:
    """How many forwards of each batch size every stage started: what batching did.

    A diagnostic the benchmark reports beside attainment, so that an arm that batches
    too rarely (or too often) shows it. Every forward a lane starts counts: a batch
    that raises counts at its size, and each of its units then rerun alone counts as
    a forward of one; a lane that could not start runs nothing and counts nothing.
    Forwards that started outside ``[keep_from, keep_until)`` (engine seconds: the
    benchmark's window) are not counted. Counts only, so a long-running server stays
    bounded (at most ``max_batch`` keys per stage).
    """

    __slots__ = ("_counts", "_lock", "keep_from", "keep_until")

    def __init__(self) -> None:
        #: Engine times between which forwards count.
        self.keep_from = -math.inf
        self.keep_until = math.inf
        self._counts: tuple[dict[int, int], ...] = tuple({} for _ in STAGES)
        self._lock = threading.Lock()

    def record(self, stage: Stage, size: int, started: float) -> None:
        """Count one forward of ``size`` units of ``stage`` that started at ``started``."""
        if not self.keep_from <= started < self.keep_until:
            return
        with self._lock:  # lane threads of one stage record at once
            counts = self._counts[stage]
            counts[size] = counts.get(size, 0) + 1

    def snapshot(self) -> BatchCounts:
        """The counts so far, by stage name and size."""
        with self._lock:
            return {stage.name.lower(): {str(k): self._counts[stage][k]
                                         for k in sorted(self._counts[stage])}
                    for stage in STAGES}

    @staticmethod
    def mean_size(counts: Mapping[str, int]) -> float:
        """Units per forward over one stage's :meth:`snapshot` entry (NaN without any)."""
        batches = sum(counts.values())
        return (sum(int(k) * n for k, n in counts.items()) / batches if batches
                else math.nan)


class UnitRunner:
    """The lane task: run the oldest waiting unit of a stage with its batch mates.

    Args:
        backend: runs the units (``run_stage``, ``run_batch``).
        waiting: the launched units.
        gate: model units hold it shared (the "CPU overlap off" ablation).
        clock: engine clock of the reported times.
        done: called once per unit, on the lane thread, with its time span and error.
        sizes: counts the forwards run, by batch size (a fresh :class:`BatchSizes` by
            default).
        broke: called with the stage and the batch's size, inside the ``except`` block,
            when a batch breaks outside the backend (a bug: the lane, the gate, the
            clock); the engine logs it with its traceback. The units then fail with
            that error, once.
    """

    def __init__(self, backend: AnyBackend, waiting: BatchQueue, gate: SharedExclusiveGate,
                 clock: Clock, done: Callable[[UnitDone], None], *,
                 sizes: BatchSizes | None = None,
                 broke: Callable[[Stage, int], None] | None = None) -> None:
        self.backend = backend
        self.waiting = waiting
        self.gate = gate
        self.clock = clock
        self.done = done
        self.sizes = BatchSizes() if sizes is None else sizes
        self.broke = broke

    def run(self, stage: Stage) -> None:
        """One lane task for ``stage`` (see the module docstring)."""
        for event in self.execute(stage):
            self.done(event)

    def execute(self, stage: Stage) -> list[UnitDone]:
        """Run the oldest waiting unit of ``stage`` with its batch mates on this thread.

        Returns:
            One completion per unit run (empty when an earlier task took this task's
            unit into its batch); :meth:`run` reports them, the engine's fast path
            handles them itself.
        """
        batch = self.waiting.take(stage)
        if not batch:
            return []
        return self._run_units(stage, batch, batch[0].issued)

    def run_formed(self, stage: Stage, batch: list[Waiting], started: float,
                   release: Callable[[Stage], None]) -> None:
        """Run a batch the dispatcher formed at ``started``; ``release`` frees its lane.

        The lane is released before the units report, so that the decision their
        completions cause sees it free. The issue time the backend sees is ``started``,
        not the launch: a unit held for mates did no work before its batch started.
        """
        for event in self.execute_formed(stage, batch, started, release):
            self.done(event)

    def execute_formed(self, stage: Stage, batch: list[Waiting], started: float,
                       release: Callable[[Stage], None]) -> list[UnitDone]:
        """Run a formed batch on this thread as :meth:`run_formed` does.

        Returns:
            Its completions, unreported: the engine's fast path handles them itself.
        """
        released = False

        def release_once(s: Stage) -> None:
            nonlocal released
            if not released:
                released = True
                release(s)

        try:
            return self._run_units(stage, batch, started, release_once)
        finally:
            release_once(stage)  # the lane is freed even if the run itself broke

    def _run_units(self, stage: Stage, batch: list[Waiting], issued: float,
                   release: Callable[[Stage], None] | None = None) -> list[UnitDone]:
        """Run ``batch`` once; one completion per unit, whatever breaks.

        The units were taken from their queue, so nobody else will run or report them:
        a break outside the backend (whose errors :meth:`_run` already assigns per
        unit) fails them all with it rather than losing them, and never runs them again.
        """
        t0 = math.nan
        try:
            lane = current_lane()
            if lane is not None:
                lane.issued_at = issued
            with self.gate.shared():
                t0 = self.clock.now()
                errors = self._run(stage, [w.live for w in batch], lane, t0)
                t1 = self.clock.now()
            if release is not None:
                release(stage)
        except Exception as exc:
            if self.broke is not None:
                self.broke(stage, len(batch))
            t1 = self.clock.now()
            t0 = t1 if math.isnan(t0) else t0
            errors = [exc] * len(batch)
        return [UnitDone(unit.live, stage, t0, t1, error, unit.issued, len(batch))
                for unit, error in zip(batch, errors, strict=True)]

    def _run(self, stage: Stage, lives: list[LiveRequest], lane: LaneInfo | None,
             started: float) -> list[BaseException | None]:
        """Run the units; returns each unit's error (None when it ran).

        A batch that raises is rerun one unit at a time, so that a faulty request fails
        alone: the stages write a state only after their forward. Each forward is
        counted in ``sizes`` at ``started``.
        """
        if lane is not None and lane.setup_error is not None:
            error = RuntimeError(f"lane {lane.group}/{lane.index} could not start: "
                                 f"{type(lane.setup_error).__name__}: {lane.setup_error}")
            return [error] * len(lives)
        record = self.sizes.record
        record(stage, len(lives), started)
        try:
            self.backend.run_batch(stage, [live.state for live in lives], lane)
            return [None] * len(lives)
        except Exception as exc:  # a faulty unit fails alone
            if len(lives) == 1:
                return [exc]
        errors: list[BaseException | None] = []
        for live in lives:
            record(stage, 1, started)
            try:
                self.backend.run_stage(stage, live.state, lane)
                errors.append(None)
            except Exception as exc:
                errors.append(exc)
        return errors
