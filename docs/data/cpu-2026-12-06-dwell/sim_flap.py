"""The switch near its band in the simulator, with and without a dwell (issue 28).

The block3 table (../cpu-2026-12-06-switch/rtf.json) with every stage's work scaled by
1.6 puts phases 8 where the engine's runs read ρ_A about 0.93, on the band. Each row is
one 200 s simulation of ``xinfer_batch_switch`` (slots 4,4,8, max_batch 4, unit noise
0.1) beside unbatched (1,1,2) and lane-batched (4,4,8) XInfer on the same table.

    python docs/data/cpu-2026-12-06-dwell/sim_flap.py > docs/data/cpu-2026-12-06-dwell/sim_flap.txt
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from xinfer_ros.core.saturation import SaturationSettings
from xinfer_ros.sim.engine_loop import SimConfig, Simulation

HERE = Path(__file__).resolve().parent
TABLE = HERE.parent / "cpu-2026-12-06-switch" / "rtf.json"
SCALE = 1.6


def scaled_table(directory: Path) -> str:
    """Write the block3 table with its work scaled by SCALE; return its path."""
    table = json.loads(TABLE.read_text())
    table["work_ms"] = {s: w * SCALE for s, w in table["work_ms"].items()}
    path = directory / "rtf_scaled.json"
    path.write_text(json.dumps(table))
    return str(path)


def main() -> None:
    """Print one row per seed: unb, lane, and the switch without and with a dwell."""
    with tempfile.TemporaryDirectory() as tmp:
        table = scaled_table(Path(tmp))
        base = SimConfig(robots=8, workload="phases", rate_table=table, noise=0.1)
        for seed in (1, 2, 3):
            row = [f"seed {seed}"]
            for name, policy, slots, batch in (("unb", "xinfer", (1, 1, 2), 1),
                                               ("lane", "xinfer", (4, 4, 8), 4)):
                cfg = base.with_(policy=policy, slots=slots, max_batch=batch, seed=seed)
                row.append(f"{name} {100 * Simulation(cfg).run().metrics.attainment:5.1f}")
            for dwell in (0.0, 1.0):
                cfg = base.with_(policy="xinfer_batch_switch", slots=(4, 4, 8), max_batch=4,
                                 seed=seed,
                                 policy_kwargs={"saturation": SaturationSettings(dwell=dwell)})
                sim = Simulation(cfg)
                attainment = sim.run().metrics.attainment
                summary = sim.policy.saturation  # type: ignore[attr-defined]
                row.append(f"sw dwell {dwell:.0f} s {100 * attainment:5.1f} "
                           f"({summary['switches']} switches, saturated "
                           f"{summary['saturated_share']:.0%})")
            print(" | ".join(row), flush=True)


if __name__ == "__main__":
    main()
