"""The simulator's reading of sw against swt at phases 12, on a slowed shipped table.

The shipped table's work is scaled by a host slowdown (1.0, 1.3, 1.6), three seeds
each. Run from the repository root: .venv/bin/python docs/data/cpu-2026-12-06-tight/sim.py
"""

import json
import tempfile
from pathlib import Path

from xinfer_ros.config_paths import config_dir
from xinfer_ros.sim.engine_loop import SimConfig, Simulation

TABLE = json.loads((config_dir() / "rate_table_cpu_pi0_tiny_batch4_factors.json").read_text())

with tempfile.TemporaryDirectory() as tmp:
    for scale in (1.0, 1.3, 1.6):
        table = {**TABLE, "work_ms": {s: w * scale for s, w in TABLE["work_ms"].items()}}
        path = Path(tmp) / f"table_{scale}.json"
        path.write_text(json.dumps(table))
        for policy in ("xinfer_batch_switch", "xinfer_batch_switch_tight"):
            runs = []
            for seed in (1, 2, 3):
                sim = Simulation(SimConfig(
                    policy=policy, workload="phases", robots=12, duration=40.0,
                    window=(10.0, 40.0), slots=(4, 4, 8), max_batch=4,
                    rate_table=str(path), seed=seed))
                m = sim.run().metrics
                runs.append(f"{100 * m.attainment:.1f} % / {m.goodput_rps:.1f} rps")
            print(f"work x{scale}  {policy:27s} " + "; ".join(runs))
