"""The block's arms in the engine-loop simulator, on its table slowed by learned factors.

The table is this directory's ``rtf.json`` (the block's calibration) with its work
scaled per stage (``RateTable.with_work_scaled``), as the engine's online correction
scales it; 3 seeds per arm, execution noise sigma 0.1, the bench's link, tick and
preparation. An arm is ``unb``, ``lane``, ``fs`` or ``POLICY`` on slots 4,4,8 with
``--max-batch 4`` (``POLICY:{json kwargs}`` adds constructor arguments).
Usage: python sim_scaled.py KV,KP,KA ROBOTS,... ARM,...
"""
import json
import statistics as st
import sys
import tempfile
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from xinfer_ros.core.rate_table import load_rate_table, write_rate_table
from xinfer_ros.sim.engine_loop import SimConfig, simulate

ARMS = {
    "unb": ("xinfer", (1, 1, 2), 1, {}),
    "lane": ("xinfer", (4, 4, 8), 4, {}),
    "fs": ("xinfer_batch_fill_slots", (4, 4, 8), 4, {}),
}


def arm_of(name: str) -> tuple[str, tuple[int, int, int], int, dict]:
    """Policy, slots, max_batch and policy arguments of an arm name."""
    if name in ARMS:
        return ARMS[name]
    policy, _, kwargs = name.partition(":")
    return policy, (4, 4, 8), 4, json.loads(kwargs) if kwargs else {}


def one(job: tuple[str, int, int, str]) -> tuple[str, int, float, float]:
    """One simulated run: its arm, robots, attainment and 90 ms class attainment (%)."""
    arm, robots, seed, table = job
    policy, slots, max_batch, kwargs = arm_of(arm)
    cfg = SimConfig(policy=policy, robots=robots, workload="phases", seed=seed,
                    duration=40.0, window=(10.0, 40.0), rate_table=table, noise=0.1,
                    cpu_prep=1e-3, link_up=2e-3, link_down=2e-3, tick=2e-3, slots=slots,
                    max_batch=max_batch, policy_kwargs=kwargs)
    m = simulate(cfg).metrics
    return arm, robots, m.attainment * 100, m.per_budget.get("90", float("nan")) * 100


if __name__ == "__main__":
    factors = tuple(float(x) for x in sys.argv[1].split(","))
    robots = [int(x) for x in sys.argv[2].split(",")]
    arms = sys.argv[3].split(",")
    base = Path(__file__).with_name("rtf.json")
    with tempfile.TemporaryDirectory() as tmp:
        table = str(write_rate_table(load_rate_table(base).with_work_scaled(
            factors, "sim_scaled.py"), Path(tmp) / "rtf_scaled.json"))
        jobs = [(a, n, seed, table) for n in robots for a in arms for seed in range(3)]
        with ProcessPoolExecutor(2) as ex:
            results = list(ex.map(one, jobs))
    by: dict[tuple[int, str], list[tuple[float, float]]] = {}
    for arm, n, att, tight in results:
        by.setdefault((n, arm), []).append((att, tight))
    for (n, arm), v in sorted(by.items()):
        print(f"{n:>2} {arm:<40} attainment {[round(a, 1) for a, _ in v]} median "
              f"{st.median(a for a, _ in v):5.1f}  90 ms class {[round(t, 1) for _, t in v]}")
