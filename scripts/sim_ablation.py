#!/usr/bin/env python3
"""Ablation table (paper Table 8-like): full XInfer vs each switch at one load.

Runs every variant (the registry's ablation presets) at ``--robots`` on ``--workload``
for ``--rounds`` rounds (seeds as ``xinfer-sim``: 0, 1, 2, ...) and prints mean and
minimum SLO attainment per variant, plus the change against full XInfer.

Usage: ``python scripts/sim_ablation.py --workload phases --robots 18 [--rounds 3]
[--duration 210] [--variants xinfer,xinfer_no_interference,...] [--json FILE]``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from xinfer_ros.sim.engine_loop import SimConfig
from xinfer_ros.sim.runner import round_seeds, run_many

__all__ = ["DEFAULT_VARIANTS", "main"]

DEFAULT_VARIANTS = (
    "xinfer",
    "xinfer_no_interference",
    "xinfer_strict_priority",
    "xinfer_no_arrival",
    "xinfer_entry_only",
    "xinfer_zero_slack",
    "xinfer_no_slot_aware",
    "xinfer_paper",
)


def main(argv: list[str] | None = None) -> int:
    """Run the variants and print the table."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workload", default="phases")
    p.add_argument("--robots", type=int, default=18)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--duration", type=float, default=210.0)
    p.add_argument("--warmup", type=float, default=30.0)
    p.add_argument("--variants", default=",".join(DEFAULT_VARIANTS))
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--json", type=Path, default=None)
    a = p.parse_args(argv)
    variants = [v.strip() for v in a.variants.split(",") if v.strip()]
    cfgs = [SimConfig(policy=v, robots=a.robots, workload=a.workload, seed=s,
                      duration=a.duration, window=(a.warmup, a.duration))
            for v in variants for s in round_seeds(0, a.rounds)]
    results = run_many(cfgs, a.workers, progress=False)
    att: dict[str, list[float]] = {}
    for cfg, res in zip(cfgs, results, strict=True):
        att.setdefault(cfg.policy, []).append(res.metrics.attainment * 100.0)
    base = sum(att[variants[0]]) / len(att[variants[0]])
    print(f"ablation on {a.workload}, {a.robots} robots, {a.rounds} x {a.duration:g} s")
    print(f"{'variant':26s} {'mean att%':>9s} {'min att%':>9s} {'vs full':>8s}  rounds")
    for v in variants:
        xs = att[v]
        mean = sum(xs) / len(xs)
        print(f"{v:26s} {mean:9.2f} {min(xs):9.2f} {mean - base:+8.2f}  "
              + " ".join(f"{x:.2f}" for x in xs))
    if a.json is not None:
        a.json.write_text(json.dumps({"workload": a.workload, "robots": a.robots,
                                      "rounds": a.rounds, "duration": a.duration,
                                      "attainment_pct": att}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
