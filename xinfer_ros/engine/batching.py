"""Launched units waiting for a lane, taken by the lanes in batches (issue 16, item 3).

The dispatcher puts every unit the policy launched here and hands its lane group one
task per unit. A lane task takes the oldest waiting unit of its stage and, when the
backend can stack states, up to ``max_batch − 1`` more of the same batch key, and runs
them as one forward. Units launched in the same decision thus run together, and so do
units that waited behind busy lanes (with batching each stage has fewer lanes than
slots). With ``max_batch = 1`` each task takes one unit, the paper's engine. Units of
different keys (a robot with a camera missing, say) run in separate batches: they queue
for the stage's ``ceil(slots / max_batch)`` lanes while the policy counts them running.

Every task finds either work or an empty queue: there are as many tasks as units, and
a task never takes fewer than one waiting unit.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from xinfer_ros.core.stages import STAGES, Stage
from xinfer_ros.engine.clock import Clock
from xinfer_ros.engine.events import UnitDone
from xinfer_ros.engine.lanes import LaneInfo, SharedExclusiveGate, current_lane

if TYPE_CHECKING:
    from xinfer_ros.engine.admission import LiveRequest
    from xinfer_ros.engine.backends.base import AnyBackend

__all__ = ["BatchQueue", "UnitRunner", "Waiting"]


@dataclass(frozen=True, slots=True)
class Waiting:
    """One launched unit waiting for a lane.

    Attributes:
        live: the engine's request record.
        issued: engine time the policy launched the unit.
        key: its batch key (None: it runs alone).
    """

    live: LiveRequest
    issued: float
    key: Hashable | None = None


class BatchQueue:
    """Launched units per stage, in launch order; thread-safe.

    Args:
        max_batch: most units one lane task takes (>= 1).
        key: ``key(stage, live)``: the unit's batch key, None when it runs alone.
    """

    def __init__(self, max_batch: int,
                 key: Callable[[Stage, LiveRequest], Hashable | None]) -> None:
        if max_batch < 1:
            raise ValueError(f"max_batch must be >= 1, got {max_batch!r}")
        self.max_batch = max_batch
        self._key = key
        self._lock = threading.Lock()
        self._waiting: dict[Stage, deque[Waiting]] = {s: deque() for s in STAGES}

    def put(self, stage: Stage, live: LiveRequest, issued: float) -> None:
        """Queue a launched unit, with its batch key (the caller's thread computes it)."""
        key = None
        if self.max_batch > 1:
            try:
                key = self._key(stage, live)
            except Exception:  # a state the backend cannot key runs alone (and fails there)
                key = None
        with self._lock:
            self._waiting[stage].append(Waiting(live, issued, key))

    def take(self, stage: Stage) -> list[Waiting]:
        """The oldest waiting unit of ``stage`` and its batch mates (empty if none wait).

        Mates share the oldest unit's batch key; units of other keys keep their place.
        """
        with self._lock:
            waiting = self._waiting[stage]
            if not waiting:
                return []
            first = waiting.popleft()
            batch = [first]
            if first.key is None:
                return batch
            kept: deque[Waiting] = deque()
            while waiting and len(batch) < self.max_batch:
                unit = waiting.popleft()
                (batch if unit.key == first.key else kept).append(unit)
            kept.extend(waiting)
            self._waiting[stage] = kept
            return batch

    def __len__(self) -> int:
        with self._lock:
            return sum(len(q) for q in self._waiting.values())


class UnitRunner:
    """The lane task: run the oldest waiting unit of a stage with its batch mates.

    Args:
        backend: runs the units (``run_stage``, ``run_batch``).
        waiting: the launched units.
        gate: model units hold it shared (the "CPU overlap off" ablation).
        clock: engine clock of the reported times.
        done: called once per unit, on the lane thread, with its time span and error.
    """

    def __init__(self, backend: AnyBackend, waiting: BatchQueue, gate: SharedExclusiveGate,
                 clock: Clock, done: Callable[[UnitDone], None]) -> None:
        self.backend = backend
        self.waiting = waiting
        self.gate = gate
        self.clock = clock
        self.done = done

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
        lane = current_lane()
        if lane is not None:
            lane.issued_at = batch[0].issued
        with self.gate.shared():
            t0 = self.clock.now()
            errors = self._run(stage, [w.live for w in batch], lane)
            t1 = self.clock.now()
        return [UnitDone(unit.live, stage, t0, t1, error)
                for unit, error in zip(batch, errors, strict=True)]

    def _run(self, stage: Stage, lives: list[LiveRequest],
             lane: LaneInfo | None) -> list[BaseException | None]:
        """Run the units; returns each unit's error (None when it ran).

        A batch that raises is rerun one unit at a time, so that a faulty request fails
        alone: the stages write a state only after their forward.
        """
        if lane is not None and lane.setup_error is not None:
            error = RuntimeError(f"lane {lane.group}/{lane.index} could not start: "
                                 f"{type(lane.setup_error).__name__}: {lane.setup_error}")
            return [error] * len(lives)
        try:
            self.backend.run_batch(stage, [live.state for live in lives], lane)
            return [None] * len(lives)
        except Exception as exc:  # a faulty unit fails alone
            if len(lives) == 1:
                return [exc]
        errors: list[BaseException | None] = []
        for live in lives:
            try:
                self.backend.run_stage(stage, live.state, lane)
                errors.append(None)
            except Exception as exc:
                errors.append(exc)
        return errors
