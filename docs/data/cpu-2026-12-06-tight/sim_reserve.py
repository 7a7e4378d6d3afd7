"""A lane held back from ordinary batches, in the simulator only (not in the engine).

While one lane of a stage runs ordinary units, the other lanes take tight units or
idle. Run from the repository root:
.venv/bin/python docs/data/cpu-2026-12-06-tight/sim_reserve.py
"""

import json
import tempfile
from pathlib import Path

from xinfer_ros.config_paths import config_dir
from xinfer_ros.sim.engine_loop import SimConfig, Simulation
from xinfer_ros.sim.gpu import BatchedGpuModel, Unit


class Reserving(BatchedGpuModel):
    """The batched GPU whose stages run ordinary units on one lane at a time."""

    def _ordinary_running(self, stage: int) -> bool:
        return any(b.stage == stage and not b.cap for b in self._batches)

    def issue(self, key: object, stage: int, t: float, *, limit: int = 0) -> Unit:
        """As the batched GPU, but an ordinary unit waits while one runs on the stage."""
        if limit or self.former is not None:
            return super().issue(key, stage, t, limit=limit)
        joinable = [b for b in self._batches if b.open and b.stage == stage and not b.cap
                    and b.started == t and len(b.members) < self.max_batch]
        if not joinable and self._ordinary_running(stage) and not self.spread:
            unit = self._new_unit(key, stage, t)
            self._waiting[stage].append(unit)
            self._rerate(t)
            return unit
        return super().issue(key, stage, t)

    def _start_waiting(self, stage: int, t: float) -> None:
        """As the batched GPU, on every free lane, but ordinary units one lane at a time."""
        waiting = self._waiting[stage]
        free = self.lanes[stage] - sum(b.stage == stage for b in self._batches)
        while waiting and free > 0 and (waiting[0].limit or not self._ordinary_running(stage)):
            super()._start_waiting(stage, t)
            free -= 1


ARMS = (("xinfer_batch_switch", False), ("xinfer_batch_switch_tight", False),
        ("xinfer_batch_switch_tight", True))
TABLE = json.loads((config_dir() / "rate_table_cpu_pi0_tiny_batch4_factors.json").read_text())
with tempfile.TemporaryDirectory() as tmp:
    for scale in (1.0, 1.3, 1.6, 2.0):
        table = {**TABLE, "work_ms": {s: w * scale for s, w in TABLE["work_ms"].items()}}
        path = Path(tmp) / f"table_{scale}.json"
        path.write_text(json.dumps(table))
        for policy, reserve in ARMS:
            runs = []
            for seed in (1, 2, 3):
                sim = Simulation(SimConfig(
                    policy=policy, workload="phases", robots=12, duration=40.0,
                    window=(10.0, 40.0), slots=(4, 4, 8), max_batch=4,
                    rate_table=str(path), seed=seed))
                if reserve:
                    sim.gpu.__class__ = Reserving
                m = sim.run().metrics
                runs.append(f"{100 * m.attainment:.1f}/{m.goodput_rps:.1f}")
            print(f"x{scale} {policy:27s} res={reserve:d} " + "; ".join(runs), flush=True)
