#!/usr/bin/env python3
"""Sweep a common scale k of the interference matrix and report baseline capacities.

The default rate table's shape (which stage slows which, relative strengths) is kept;
only the overall strength ``alpha = k * alpha_shape`` is varied. For each k a table is
written to a temporary directory and the given *baseline* policies (FIFO, EDF by
default) are run on ``phases`` over a robot range; the printout is each policy's
attainment per count and the ERC on that grid. Used once to choose k so that FIFO's
and EDF's capacities land near the paper's (14 and 12 robots); XInfer is never run
here, so the table is not fitted to make it win.

Usage: ``python scripts/sim_calibrate_alpha.py --scales 1.5 2 2.5 --robots 10-20
[--policies fifo,edf] [--rounds 1] [--duration 120]``.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from xinfer_ros.cli.sim import parse_counts
from xinfer_ros.core.rate_table import (
    DEFAULT_INTERFERENCE_SHAPE,
    interference_model_table,
    write_rate_table,
)
from xinfer_ros.sim.engine_loop import SimConfig
from xinfer_ros.sim.erc import Criterion, erc_from_grid, passes
from xinfer_ros.sim.runner import round_seeds, run_many

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    """Run the sweep and print the table."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scales", type=float, nargs="+", required=True)
    p.add_argument("--robots", type=parse_counts, default=parse_counts("10-20"))
    p.add_argument("--policies", default="fifo,edf")
    p.add_argument("--workload", default="phases")
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--duration", type=float, default=120.0)
    p.add_argument("--workers", type=int, default=2)
    a = p.parse_args(argv)
    policies = a.policies.split(",")
    tmp = Path(tempfile.mkdtemp(prefix="alpha_"))
    for k in a.scales:
        alpha = [[k * x for x in row] for row in DEFAULT_INTERFERENCE_SHAPE]
        path = write_rate_table(interference_model_table(alpha), tmp / f"k{k}.json")
        cfgs = [SimConfig(policy=pol, robots=n, workload=a.workload, seed=s,
                          duration=a.duration, window=(30.0, a.duration), rate_table=str(path))
                for pol in policies for n in a.robots for s in round_seeds(0, a.rounds)]
        res = run_many(cfgs, a.workers, progress=False)
        for pol in policies:
            verdicts: dict[int, list[bool]] = {}
            atts = []
            for cfg, r in zip(cfgs, res, strict=True):
                if cfg.policy == pol:
                    verdicts.setdefault(cfg.robots, []).append(
                        passes(r.metrics, Criterion.ATTAINMENT))
                    atts.append(f"{cfg.robots}:{r.metrics.attainment * 100:.1f}")
            erc = erc_from_grid(verdicts, Criterion.ATTAINMENT)
            print(f"k={k:g} {pol:10s} ERC={erc.erc:2d}  " + " ".join(atts), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
