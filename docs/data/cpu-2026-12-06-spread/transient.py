"""The switch's first seconds in the simulator: unbatched serving past saturation, then batched.

Runs ``xinfer_batch_switch`` (slots 4,4,8, max_batch 4, the shipped CPU table) pinned
unbatched for the first X seconds and pinned batched after, three seeds each, and prints
the attainment of the default window (30-210 s). X = 0 is lane batching from the start.
Usage (from the repository root):
    python docs/data/cpu-2026-12-06-spread/transient.py 12 15 18 [--phase-spread]
"""
import sys

from xinfer_ros.sim.engine_loop import SimConfig, Simulation, make_sim_policy

TABLE = "config/rate_table_cpu_pi0_tiny_batch4_factors.json"


def pinned_unbatched_until(until):
    """A policy factory: the switch pinned unbatched before ``until``, batched from it."""
    def build(cfg, table):
        policy = make_sim_policy(cfg, table)
        policy.pin_saturation(False)
        dispatch = policy._dispatch

        def timed(t):
            if t >= until:
                policy.pin_saturation(True)
            return dispatch(t)

        policy._dispatch = timed
        return policy
    return build


if __name__ == "__main__":
    spread = "--phase-spread" in sys.argv
    for robots in [int(a) for a in sys.argv[1:] if not a.startswith("--")]:
        row = []
        for until in (0.0, 0.25, 0.5, 1.0, 2.0, 3.0):
            kept = []
            for seed in (0, 1, 2):
                cfg = SimConfig(policy="xinfer_batch_switch", robots=robots, rate_table=TABLE,
                                slots=(4, 4, 8), max_batch=4, seed=seed, phase_spread=spread)
                res = Simulation(cfg, policy_factory=pinned_unbatched_until(until)).run()
                kept.append(f"{res.metrics.attainment * 100:.1f}")
            row.append(f"{until:g} s: {'/'.join(kept)}")
        print(f"phases {robots}{' spread' if spread else ''}: " + ", ".join(row), flush=True)
