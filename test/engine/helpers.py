"""Shared builders for the engine tests (emulated backend, time-compressed clock)."""

from __future__ import annotations

import threading
from typing import Any

from xinfer_ros.core.policy import Policy
from xinfer_ros.core.rate_table import RateTable, default_rate_table
from xinfer_ros.core.stages import Stage
from xinfer_ros.engine import Clock, EmulatedBackend, EngineConfig, StageEngine
from xinfer_ros.engine.lanes import LaneInfo

#: Engine seconds per wall second in tests: fast, yet OS wake-up jitter stays small
#: against the emulated unit times.
SCALE = 3.0


class MonitoredBackend(EmulatedBackend):
    """Emulated backend that records peak concurrency and can fail chosen stages."""

    def __init__(self, *args: Any, fail: dict[str, Stage] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fail = fail or {}
        self._mon = threading.Lock()
        self.now_running = [0, 0, 0]
        self.peak = [0, 0, 0]
        self.peak_total = 0
        self.order: list[tuple[str, Stage]] = []

    def run_stage(self, stage: Stage, state: Any, lane: LaneInfo | None) -> None:
        with self._mon:
            self.now_running[stage] += 1
            self.peak[stage] = max(self.peak[stage], self.now_running[stage])
            self.peak_total = max(self.peak_total, sum(self.now_running))
        try:
            if self.fail.get(state.robot_id) is stage:
                raise RuntimeError(f"injected fault in {stage.name}")
            super().run_stage(stage, state, lane)
        finally:
            with self._mon:
                self.now_running[stage] -= 1
                self.order.append((state.robot_id, stage))


def make_engine(
    policy: str | Policy = "xinfer",
    config: EngineConfig | None = None,
    *,
    table: RateTable | None = None,
    scale: float = SCALE,
    backend_cls: type[MonitoredBackend] = MonitoredBackend,
    **backend_kwargs: Any,
) -> tuple[StageEngine, MonitoredBackend]:
    """A started engine over a :class:`MonitoredBackend` (or subclass) on a compressed clock."""
    clock = Clock(scale)
    tab = table if table is not None else default_rate_table()
    backend = backend_cls(tab, clock, **backend_kwargs)
    engine = StageEngine(backend, policy, config or EngineConfig(slots=(4, 4, 6)),
                         rate_table=tab, clock=clock)
    return engine.start(), backend
