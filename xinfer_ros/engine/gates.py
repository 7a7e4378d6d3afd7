"""Which launches the device may take now: physical slots and the §6.4 switches.

A policy decides what it would like to launch; :class:`ExecutionGates` holds what is
running and vetoes launches that the configured slots or the ablation switches forbid
(serial device, no cross-stage overlap G, no intra-stage concurrency M, round
barrier). The dispatcher owns it: one thread, no lock.
"""

from __future__ import annotations

from xinfer_ros.core.stages import NUM_STAGES, Stage
from xinfer_ros.engine.lanes import ACTION_GROUP, CONTEXT_GROUP, group_of
from xinfer_ros.engine.types import EngineConfig

__all__ = ["ExecutionGates"]


class ExecutionGates:
    """Running units per stage and lane group, and the round barrier's cohort.

    Args:
        config: The engine configuration; replaced by :meth:`reconfigure`.
    """

    def __init__(self, config: EngineConfig) -> None:
        self.config = config
        #: Units running per stage.
        self.running: list[int] = [0] * NUM_STAGES
        self._group_running = {CONTEXT_GROUP: 0, ACTION_GROUP: 0}
        self._round_units = 0
        self._round_cohort: set[int] = set()
        #: Cohort members whose Prefill has not started: the round's Context is unfinished.
        self._round_pending: set[int] = set()

    def reconfigure(self, config: EngineConfig) -> None:
        """Apply new switches; turning the round barrier off ends the current round."""
        self.config = config
        if not config.round_barrier:
            self._round_units, self._round_pending = 0, set()

    def has_free_slot(self, stage: int) -> bool:
        """Whether ``stage`` runs fewer units than its effective slots."""
        return self.running[stage] < self.config.effective_slots[stage]

    def open_round(self) -> bool:
        """Start a decision; True when it opens a new round (round barrier only)."""
        opening = (self.config.round_barrier and self._round_units == 0
                   and not self._round_pending)
        if opening:
            self._round_cohort = set()
        return opening

    def allows(self, stage: Stage, request_id: int, opening: bool) -> bool:
        """Whether a unit of ``stage`` for ``request_id`` may start now."""
        cfg = self.config
        if not self.has_free_slot(stage):
            return False
        group = group_of(stage)
        if cfg.serial_device and any(self.running):
            return False
        if not cfg.cross_stage:
            other = ACTION_GROUP if group == CONTEXT_GROUP else CONTEXT_GROUP
            if self._group_running[other]:
                return False
        if not cfg.intra_stage and group == CONTEXT_GROUP and self._group_running[group]:
            return False
        if cfg.round_barrier and not opening:
            # Inside a round only the cohort's Context chain continues (ViT -> Prefill);
            # everything else waits for the barrier.
            return stage is Stage.PREFILL and request_id in self._round_cohort
        return True

    def issued(self, stage: Stage, request_id: int, opening: bool) -> None:
        """Count a unit that starts now."""
        self.running[stage] += 1
        self._group_running[group_of(stage)] += 1
        if self.config.round_barrier:
            self._round_units += 1
            if opening and stage is Stage.VIT:
                self._round_cohort.add(request_id)
                self._round_pending.add(request_id)
            elif stage is Stage.PREFILL:
                self._round_pending.discard(request_id)

    def completed(self, stage: Stage) -> None:
        """Count a unit that ended (completed or raised)."""
        self.running[stage] -= 1
        self._group_running[group_of(stage)] -= 1
        if self.config.round_barrier and self._round_units > 0:
            self._round_units -= 1

    def forget(self, request_id: int) -> None:
        """A finished request no longer holds its round's Context open."""
        self._round_pending.discard(request_id)
