"""Modelled GPU: non-preemptive stage units progressing at calibrated concurrent rates.

Each issued unit first spends its stage-issue overhead ``h_s`` (host submission, no
progress), then performs ``W_s`` of isolated-time work at rate ``ρ_s(n_{-j})``, where
``n_{-j}`` counts the *other* issued units per stage (Eq. 8-9). Whenever the set of
issued units changes, every unit's progress is brought up to date and its finish time
recomputed, because the rates of all running units change with concurrency.

Execution-time noise multiplies each unit's work by a seeded log-normal factor, so the
scheduler's predictor (which assumes exactly ``W_s``) is good but not exact. A rate
error multiplies the rate of each (stage, concurrency) state by a seeded log-normal
factor fixed for the run: the rate table misjudges some states consistently, as a
table calibrated on another machine or driver would.

:class:`BatchedGpuModel` models an engine that batches (issue 16, item 3): a stage's
units run in batches of at most ``max_batch`` on ``ceil(slots / max_batch)`` lanes, as
:mod:`xinfer_ros.engine.batching` runs them. Units issued at one instant share a batch
they start on a free lane; a unit with no free lane waits, and a lane that comes free
starts the waiting units as one batch. A batch progresses like one unit, at the rate
of a unit with the others in running batches around it, and all its units finish
together. A table calibrated with the same ``max_batch`` measures that rate with the
units split evenly over the lanes; the engine's batches need not be even.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from xinfer_ros.core.batch_cost import BatchFactors
from xinfer_ros.core.batching import lanes_for, next_batch_size, take_tight, tight_end
from xinfer_ros.core.progress import finish_time, progress

__all__ = ["BatchedGpuModel", "Former", "GpuModel", "RateFn", "Unit"]

#: ``rate(stage, (n_V, n_P, n_A) of the other units) -> ρ`` (dimensionless, > 0).
RateFn = Callable[[int, tuple[int, int, int]], float]
#: ``former(stage, waiting keys oldest first, t)``: the keys of the batch a free lane
#: runs (lead first) and the latest time it starts (``t``: now; later: the lead waits for
#: mates until then, keeping the lane free).
Former = Callable[[int, list[object], float], tuple[Sequence[object], float]]


@dataclass(slots=True)
class Unit:
    """One issued, non-preemptive unit.

    Attributes:
        key: Caller's handle (the request id).
        stage: Stage index (0 ViT, 1 Prefill, 2 Action).
        issued: Issue time (s).
        compute_start: ``issued + h_s``: work starts here.
        work: Remaining isolated-time work (s).
        rate: Current progress rate (isolated seconds per second).
        last: Time up to which ``work`` is accounted.
        finish: Predicted finish under the current rate (s).
        started: When its forward started (s): its issue, or its batch's start.
        batch: Units in its forward (1 unbatched).
        spread: Whether its policy spread lanes when it was issued (a batched GPU's
            batch it leads takes its share of the waiting units).
        limit: 0, or (a tight unit, ``Launch.batch_limit``; a batched GPU only) the
            most units of its forward, all tight.
    """

    key: object
    stage: int
    issued: float
    compute_start: float
    work: float
    rate: float
    last: float
    finish: float
    started: float = 0.0
    batch: int = 1
    spread: bool = False
    limit: int = 0


class GpuModel:
    """Non-preemptive units with concurrency-dependent rates and per-stage slots.

    Args:
        rate: Rate lookup (clipped to the calibrated bounds by the caller's table).
        work: Isolated work ``W_s`` per stage (s).
        overhead: Issue overhead ``h_s`` per stage (s).
        slots: Execution slots per stage.
        noise: Log-normal sigma of the per-unit work factor (0 disables noise).
        seed: Seed of the noise stream and of the rate errors.
        rate_error: Log-normal sigma of the per-(stage, concurrency) rate factor (0: the
            GPU runs at the table's rates).
        max_batch: Most units of a stage per batch: 1 here (every unit runs alone);
            :class:`BatchedGpuModel` takes more.
    """

    def __init__(
        self,
        rate: RateFn,
        work: tuple[float, float, float],
        overhead: tuple[float, float, float],
        slots: tuple[int, int, int],
        *,
        noise: float = 0.0,
        seed: int = 0,
        rate_error: float = 0.0,
        max_batch: int = 1,
    ) -> None:
        if noise < 0 or rate_error < 0:
            raise ValueError(f"noise and rate_error must be >= 0, got {noise!r}, "
                             f"{rate_error!r}")
        self._rate_error = rate_error
        self._seed = seed
        self._rate = rate
        self._work = work
        self._overhead = overhead
        self.slots = slots
        self._noise = noise
        self._rng = np.random.default_rng(np.random.SeedSequence([seed, 0x6E0]))
        # Pre-drawn noise factors: one draw call per batch is far cheaper than one per
        # unit, and the stream stays a pure function of the seed.
        self._factors: list[float] = []
        self.units: dict[object, Unit] = {}
        self.counts: list[int] = [0, 0, 0]
        self.next_finish: float = math.inf
        self._cache: dict[tuple[int, int, int, int], float] = {}
        self.busy_time: float = 0.0
        self._busy_since: float | None = None
        self.max_batch = max_batch
        self.lanes = tuple(lanes_for(n, max_batch) for n in slots)
        self._setup()

    def _setup(self) -> None:
        """The model's own state beyond the units (none here: no batches)."""
        if self.max_batch != 1:
            raise ValueError(f"GpuModel runs every unit alone (max_batch 1, got "
                             f"{self.max_batch}); BatchedGpuModel batches them")

    def _factor(self) -> float:
        """Next multiplicative noise factor (mean 1)."""
        if self._noise == 0.0:
            return 1.0
        if not self._factors:
            s = self._noise
            self._factors = np.exp(
                self._rng.normal(-0.5 * s * s, s, size=4096)
            ).tolist()
        return self._factors.pop()

    def free(self, stage: int) -> int:
        """Free execution slots of ``stage``."""
        return self.slots[stage] - self.counts[stage]

    def _lookup(self, stage: int, nv: int, np_: int, na: int) -> float:
        key = (stage, nv, np_, na)
        r = self._cache.get(key)
        if r is None:
            r = self._rate(stage, (nv, np_, na))
            if not r > 0:
                raise ValueError(f"rate for stage {stage} at {(nv, np_, na)} is {r!r}")
            if self._rate_error > 0.0:
                # One factor per state, whatever order states are met in; dividing the
                # rate by a mean-1 factor makes durations mean-1 off the table.
                s = self._rate_error
                rng = np.random.default_rng([self._seed, 0xE77, stage, nv, np_, na])
                r /= math.exp(rng.normal(-0.5 * s * s, s))
            self._cache[key] = r
        return r

    def _advance(self, t: float) -> None:
        """Account work done by every unit up to ``t`` at its current rate."""
        for u in self.units.values():
            u.work -= progress(u.rate, u.compute_start, u.last, t)
            u.last = t

    def _rerate(self, t: float) -> None:
        """Recompute rates and finish times after a concurrency change at ``t``."""
        nv, np_, na = self.counts
        nxt = math.inf
        for u in self.units.values():
            s = u.stage
            u.rate = self._lookup(
                s, nv - (s == 0), np_ - (s == 1), na - (s == 2)
            )
            u.finish = finish_time(u.rate, u.compute_start, u.work, t)
            nxt = min(nxt, u.finish)
        self.next_finish = nxt
        self._track_busy(t, bool(self.units))

    def _new_unit(self, key: object, stage: int, t: float) -> Unit:
        """Check the slot, account work up to ``t`` and record a unit issued at ``t``."""
        if self.counts[stage] >= self.slots[stage]:
            raise ValueError(f"stage {stage} has no free slot ({self.slots[stage]} in use)")
        if key in self.units:
            raise ValueError(f"unit {key!r} is already running")
        self._advance(t)
        unit = Unit(
            key=key,
            stage=stage,
            issued=t,
            compute_start=t + self._overhead[stage],
            work=self._work[stage] * self._factor(),
            rate=1.0,
            last=t,
            finish=math.inf,
            started=t,
        )
        self.units[key] = unit
        self.counts[stage] += 1
        return unit

    def _track_busy(self, t: float, busy: bool) -> None:
        if busy and self._busy_since is None:
            self._busy_since = t
        elif not busy and self._busy_since is not None:
            self.busy_time += t - self._busy_since
            self._busy_since = None

    def issue(self, key: object, stage: int, t: float) -> Unit:
        """Start a unit of ``stage`` for ``key`` at ``t``.

        Raises:
            ValueError: If the stage has no free slot or ``key`` already runs.
        """
        unit = self._new_unit(key, stage, t)
        self._rerate(t)
        return unit

    def pop_finished(self, t: float) -> Unit:
        """Retire the unit finishing at ``t`` (== :attr:`next_finish`) and return it."""
        self._advance(t)
        done = min(self.units.values(), key=lambda u: u.finish)
        del self.units[done.key]
        self.counts[done.stage] -= 1
        self._rerate(t)
        return done

    def utilisation(self, t: float) -> float:
        """Fraction of ``[0, t]`` with at least one unit issued."""
        busy = self.busy_time + (t - self._busy_since if self._busy_since is not None else 0.0)
        return busy / t if t > 0 else 0.0


@dataclass(slots=True)
class _Batch:
    """Units of one stage running together on one lane (their progress is shared)."""

    stage: int
    started: float
    compute_start: float
    work: float
    members: list[Unit] = field(default_factory=list)
    #: Units issued at ``started`` may still join (a batch a lane started from the
    #: waiting units is closed: the engine's lane took them before any new launch).
    open: bool = True
    #: 0: ordinary units; k: tight units only (``Unit.limit``), at most k.
    cap: int = 0
    rate: float = 1.0
    last: float = 0.0
    finish: float = math.inf


class BatchedGpuModel(GpuModel):
    """:class:`GpuModel` whose units run in batches of up to ``max_batch`` per lane.

    Args: as :class:`GpuModel`, whose ``max_batch`` may exceed one here, and
        batch_factors: f_s(k) of a table with batch factors
            (:func:`~xinfer_ros.core.batch_cost.batch_factors`): a batch of k then does
            f_s(k) times one unit's work at the rate of the units *outside* it, as
            :class:`~xinfer_ros.core.batch_cost.BatchCost` prices it. None: the
            even-split form, a batch at the rate of one unit among the others.

    ``counts`` and :meth:`free` count every issued unit, waiting ones included, as the
    policy's slots do; rates count the units in running batches.
    """

    def __init__(self, *args: Any, batch_factors: BatchFactors | None = None,
                 **kwargs: Any) -> None:
        self._batch_factors = batch_factors
        super().__init__(*args, **kwargs)

    def _work_of(self, stage: int, unit_work: float, k: int) -> float:
        f = self._batch_factors
        return unit_work if f is None else unit_work * f[stage][k - 1]

    def _setup(self) -> None:
        #: Set by the simulator when the policy forms batches (issue 28):
        #: ``former(stage, waiting keys oldest first, t)`` returns the keys of the batch
        #: a free lane runs and its latest start. None: lanes batch as the engine's
        #: BatchQueue does.
        self.former: Former | None = None
        #: Told ``(stage, keys, t)`` when a formed batch starts (with a ``former``), as
        #: the engine's dispatcher tells the policy (``XInferPolicy.start_batch``).
        self.on_start: Callable[[int, list[object], float], None] | None = None
        #: Shortest hold kept (s): a shorter one starts now, as the engine's dispatcher,
        #: which decides once per tick while a lead is held, starts it.
        self.min_hold = 0.0
        #: Held leads per stage: key -> start_by of the lead's first hold.
        self._held: list[dict[object, float]] = [{}, {}, {}]
        #: Set by the simulator from its policy (``Policy.spreads_lanes``) before it
        #: issues a decision's units, as the engine's dispatcher queues each unit with
        #: that answer; each unit keeps it (:attr:`Unit.spread`): a unit starts on a
        #: free lane before it joins a batch started at the same instant (the smallest such
        #: batch; the engine's first lane task takes the largest share, so the sizes
        #: match though the members may differ), and a lane that comes free takes
        #: ``ceil(waiting / lanes)`` units rather than ``max_batch`` when its oldest
        #: waiting unit was issued spreading.
        self.spread = False
        #: Earliest start_by of a held lead (the simulator decides again then).
        self.next_hold = math.inf
        self._batches: list[_Batch] = []
        self._waiting: list[deque[Unit]] = [deque(), deque(), deque()]
        self._running = [0, 0, 0]
        #: Units of a batch that finished, handed out one per :meth:`pop_finished`.
        self._done: deque[Unit] = deque()

    def _advance(self, t: float) -> None:
        for b in self._batches:
            b.work -= progress(b.rate, b.compute_start, b.last, t)
            b.last = t

    def _rerate(self, t: float) -> None:
        nv, np_, na = self._running
        nxt = t if self._done else math.inf
        factors = self._batch_factors is not None
        for b in self._batches:
            s = b.stage
            own = len(b.members) if factors else 1  # with factors mates are not load
            b.rate = self._lookup(s, nv - own * (s == 0), np_ - own * (s == 1),
                                  na - own * (s == 2))
            b.finish = finish_time(b.rate, b.compute_start, b.work, t)
            nxt = min(nxt, b.finish)
        self.next_finish = nxt
        self._track_busy(t, bool(self._batches))

    def _start(self, stage: int, units: list[Unit], t: float, *, open_: bool,
               cap: int = 0) -> None:
        for u in units:
            u.compute_start = t + self._overhead[stage]
            u.started, u.batch = t, len(units)
        # One noise draw per batch: the batch is one forward.
        batch = _Batch(stage, t, t + self._overhead[stage],
                       self._work_of(stage, units[0].work, len(units)), list(units),
                       open_, last=t, cap=cap)
        self._batches.append(batch)
        self._running[stage] += len(units)

    def issue(self, key: object, stage: int, t: float, *, limit: int = 0) -> Unit:
        """Start (or queue) a unit of ``stage`` for ``key`` at ``t``.

        ``limit`` (``Launch.batch_limit``): a tight unit, which runs on the next free
        lane before any ordinary unit, with tight mates only and at most ``limit``
        units in all, as the engine's ``BatchQueue`` queues it.

        Raises:
            ValueError: If the stage has no free slot or ``key`` already runs.
        """
        unit = self._new_unit(key, stage, t)
        unit.spread = self.spread
        if self.former is not None:  # the policy forms the batch at flush()
            self._waiting[stage].append(unit)
            self._rerate(t)
            return unit
        if limit:
            unit.limit = min(limit, self.max_batch)
            self._issue_tight(unit, t)
            self._rerate(t)
            return unit
        on_lanes = sum(b.stage == stage for b in self._batches)
        joinable = [b for b in self._batches if b.open and b.stage == stage and not b.cap
                    and b.started == t and len(b.members) < self.max_batch]
        joined = (None if not joinable or (self.spread and on_lanes < self.lanes[stage])
                  else min(joinable, key=lambda b: len(b.members)) if self.spread
                  else joinable[0])
        if joined is not None:
            self._join(joined, unit)
        elif on_lanes < self.lanes[stage]:
            self._start(stage, [unit], t, open_=True)
        else:
            self._waiting[stage].append(unit)
        self._rerate(t)
        return unit

    def _join(self, batch: _Batch, unit: Unit) -> None:
        """Add ``unit`` to ``batch``, which started at this instant."""
        batch.members.append(unit)
        for member in batch.members:
            member.batch = len(batch.members)
        self._running[batch.stage] += 1
        # Joined at its start instant: no work done yet, so the size sets it afresh.
        batch.work = self._work_of(batch.stage, batch.members[0].work, len(batch.members))

    def _issue_tight(self, unit: Unit, t: float) -> None:
        """Start tight ``unit`` on a lane, or queue it behind the tight units waiting.

        It joins a tight batch opened at ``t`` that stays within every member's limit,
        else takes a free lane. With every lane taken, an ordinary batch opened at ``t``
        has done no work yet: the engine's lanes start once the whole decision is
        queued, so the tight unit takes that lane and the batch's members wait again,
        behind the tight units.
        """
        stage = unit.stage
        fresh = [b for b in self._batches if b.stage == stage and b.open and b.started == t]
        for b in fresh:
            if b.cap and len(b.members) < min(b.cap, unit.limit):
                b.cap = min(b.cap, unit.limit)
                self._join(b, unit)
                return
        waiting = self._waiting[stage]
        at = tight_end(waiting)
        if sum(b.stage == stage for b in self._batches) < self.lanes[stage]:
            self._start(stage, [unit], t, open_=True, cap=unit.limit)
            return
        ordinary = [b for b in fresh if not b.cap]
        if not ordinary:
            waiting.insert(at, unit)
            return
        batch = ordinary[-1]
        self._batches.remove(batch)
        self._running[stage] -= len(batch.members)
        for i, member in enumerate(batch.members):
            member.batch = 1
            waiting.insert(at + i, member)
        self._start(stage, [unit], t, open_=True, cap=unit.limit)

    def _start_waiting(self, stage: int, t: float) -> None:
        """Start the lane freed at ``t`` on ``stage``'s next waiting batch, if any waits."""
        waiting = self._waiting[stage]
        if not waiting:
            return
        if waiting[0].limit:  # tight units wait ahead of the others
            units, cap = take_tight(waiting, self.max_batch)
            self._start(stage, units, t, open_=False, cap=cap)
            return
        size = next_batch_size(len(waiting), self.max_batch, self.lanes[stage],
                               spread=waiting[0].spread)
        self._start(stage, [waiting.popleft() for _ in range(size)], t, open_=False)

    def pop_finished(self, t: float) -> Unit:
        """Retire one unit finishing at ``t``; a batch's units come out one per call."""
        if not self._done:
            self._advance(t)
            batch = min(self._batches, key=lambda b: b.finish)
            self._batches.remove(batch)
            self._running[batch.stage] -= len(batch.members)
            self._done.extend(batch.members)
            if self.former is None:  # else the decision after this flushes
                self._start_waiting(batch.stage, t)
        done = self._done.popleft()
        del self.units[done.key]
        self.counts[done.stage] -= 1
        self._rerate(t)
        return done

    def flush(self, t: float) -> None:
        """Start the policy's batches on the free lanes (with a ``former`` only).

        The simulator calls it after every decision, so units launched at one instant
        and units freed lanes wait for are formed together. A plan that holds its lead
        for mates keeps a lane free until a later flush starts it: when a mate came, or
        at the first ``start_by`` the lead was given, at the latest (the simulator
        decides again at :attr:`next_hold`), as the engine's dispatcher forms them.
        """
        former = self.former
        if former is None:
            return
        started = False
        for stage in range(3):
            waiting = self._waiting[stage]
            held = self._held[stage]
            holds = {u.key: held[u.key] for u in waiting if u.key in held}
            free = self.lanes[stage] - sum(b.stage == stage for b in self._batches)
            while waiting and free > 0:
                free -= 1
                members, start_by = former(stage, [u.key for u in waiting], t)
                if not members:
                    raise ValueError(f"batch former chose none of the waiting stage-{stage} "
                                     f"units")
                start_by = min(start_by, held.get(members[0], math.inf))
                if start_by - t >= self.min_hold and start_by > t:
                    holds[members[0]] = start_by
                    break
                chosen = set(members)
                units = [u for u in waiting if u.key in chosen]
                if not units:
                    raise ValueError(f"batch former chose none of the waiting stage-{stage} "
                                     f"units")
                self._waiting[stage] = waiting = deque(u for u in waiting
                                                       if u.key not in chosen)
                for key in chosen:
                    holds.pop(key, None)
                if self.on_start is not None:
                    self.on_start(stage, [u.key for u in units], t)
                self._start(stage, units, t, open_=False)
                started = True
            self._held[stage] = holds
        self.next_hold = min((sb for h in self._held for sb in h.values()), default=math.inf)
        if started:
            self._advance(t)
            self._rerate(t)
