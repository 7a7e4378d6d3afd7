"""The switch held unbatched against unbatched XInfer in the simulator, record by record.

Unbatched XInfer on 1,1,2 and ``xinfer_batch_switch`` pinned unbatched on 4,4,8 with
max_batch 4, the shipped CPU table, phases, phase spreading on, seed 0, the default
210 s run: prints each pair's client record counts, its decisions, and whether every
record is the same. Usage (from the repository root):
    python docs/data/cpu-2026-12-06-offspread/sim_records.py [ROBOTS ...]   (default 8 12 14 16)
"""
import sys

from xinfer_ros.sim.engine_loop import SimConfig, Simulation, make_sim_policy

TABLE = "config/rate_table_cpu_pi0_tiny_batch4_factors.json"


def pinned_unbatched(cfg, table):
    """The switch with its verdict pinned unsaturated for the whole run."""
    policy = make_sim_policy(cfg, table)
    policy.pin_saturation(False)
    return policy


if __name__ == "__main__":
    for robots in [int(a) for a in sys.argv[1:]] or [8, 12, 14, 16]:
        common = {"robots": robots, "rate_table": TABLE, "seed": 0, "phase_spread": True,
                  "keep_records": True}
        unb = Simulation(SimConfig(policy="xinfer", slots=(1, 1, 2), max_batch=1,
                                   **common)).run()
        sw = Simulation(SimConfig(policy="xinfer_batch_switch", slots=(4, 4, 8), max_batch=4,
                                  **common), policy_factory=pinned_unbatched).run()
        same = unb.records == sw.records
        print(f"phases {robots}: records {len(unb.records)} / {len(sw.records)}, decisions "
              f"{unb.policy_calls} / {sw.policy_calls}, attainment "
              f"{unb.metrics.attainment * 100:.2f} / {sw.metrics.attainment * 100:.2f} %: "
              f"{'every record the same' if same else 'RECORDS DIFFER'}", flush=True)
