"""Parallel execution of many simulated runs (rounds x robot counts x policies).

Runs are independent and CPU-bound, so they go to a process pool; results come back
without raw records (only metrics and optional timelines) to keep pickling cheap.
Progress is shown with tqdm on stderr.
"""

from __future__ import annotations

import multiprocessing as mp
import os
from collections.abc import Iterable, Sequence

from tqdm import tqdm

from xinfer_ros.sim.engine_loop import RunResult, SimConfig, run_config

__all__ = ["default_workers", "round_seeds", "run_many"]


def default_workers() -> int:
    """Two workers by default (the project's CI machines have 2 cores)."""
    env = os.environ.get("XINFER_SIM_WORKERS")
    if env:
        return max(1, int(env))
    return max(1, min(2, os.cpu_count() or 1))


def round_seeds(seed: int, rounds: int) -> list[int]:
    """Distinct, reproducible seeds for ``rounds`` rounds starting from ``seed``."""
    return [seed * 1000 + r for r in range(rounds)]


def _key(cfg: SimConfig) -> float:
    """Expected cost, for longest-first ordering (keeps both workers busy at the end)."""
    return -(cfg.robots * cfg.duration)


def run_many(
    configs: Sequence[SimConfig],
    workers: int | None = None,
    progress: bool = True,
    desc: str = "simulating",
) -> list[RunResult]:
    """Run every config and return results in the order of ``configs``.

    Args:
        configs: Runs to perform.
        workers: Process count (``None``: :func:`default_workers`; 1 runs in-process).
        progress: Show a tqdm bar.
        desc: Progress-bar label.
    """
    n_workers = default_workers() if workers is None else max(1, workers)
    order = sorted(range(len(configs)), key=lambda i: _key(configs[i]))
    results: list[RunResult | None] = [None] * len(configs)
    bar = tqdm(total=len(configs), desc=desc, disable=not progress, unit="run", leave=False)
    try:
        if n_workers == 1 or len(configs) <= 1:
            for i in order:
                results[i] = run_config(configs[i])
                bar.update()
        else:
            ctx = mp.get_context("fork") if hasattr(os, "fork") else mp.get_context()
            with ctx.Pool(n_workers) as pool:
                it: Iterable[tuple[int, RunResult]] = pool.imap_unordered(
                    _indexed, [(i, configs[i]) for i in order], chunksize=1
                )
                for i, res in it:
                    results[i] = res
                    bar.update()
    finally:
        bar.close()
    return [r for r in results if r is not None]


def _indexed(item: tuple[int, SimConfig]) -> tuple[int, RunResult]:
    """Pool worker: run one config and keep its index."""
    i, cfg = item
    return i, run_config(cfg)
