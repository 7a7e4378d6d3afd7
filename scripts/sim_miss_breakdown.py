#!/usr/bin/env python3
"""Where do late requests lose their time? Per-stage wait/run breakdown of one sim run.

Runs one simulated configuration, keeps every finished request's stage issue and
completion times (from the policy's own ``Request`` objects) and whether each launch
was protected, then prints, for on-time and late requests of each budget class, the
mean ready-queue wait and run time of every stage. Used to tell a scheduling failure
(long waits of protected work, late promotion) from an execution one (slow units).
A second table gives the mean number of units of each budget class running alongside
each class's on-time and late requests.

Usage: ``python scripts/sim_miss_breakdown.py --policy xinfer --robots 18
[--workload phases] [--duration 60] [--rate-table FILE] [--noise 0.05]``.
"""

from __future__ import annotations

import argparse
from collections import defaultdict

import numpy as np

from xinfer_ros.core.request import Request
from xinfer_ros.sim.engine_loop import SimConfig, Simulation

__all__ = ["main"]


class _Recording(Simulation):
    """Simulation that keeps finished requests and protected-launch flags."""

    def __init__(self, cfg: SimConfig) -> None:
        super().__init__(cfg)
        self.finished: list[Request] = []
        self.protected: dict[tuple[int, int], bool] = {}
        self.ready_at: dict[tuple[int, int], float] = {}

    def _decide(self, t: float) -> None:
        self.policy_calls += 1
        out = self.policy.schedule(t)
        for launch in out.launches:
            s = int(launch.stage)
            self.gpu.issue(launch.request.request_id, s, t)
            self._pending[s] -= 1
            self.protected[(launch.request.request_id, s)] = launch.protected
        self.finished.extend(out.finished)


def main(argv: list[str] | None = None) -> int:
    """Run and print the breakdown."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--policy", default="xinfer")
    p.add_argument("--robots", type=int, default=18)
    p.add_argument("--workload", default="phases")
    p.add_argument("--duration", type=float, default=60.0)
    p.add_argument("--rate-table", default=None)
    p.add_argument("--noise", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=11)
    a = p.parse_args(argv)
    cfg = SimConfig(policy=a.policy, robots=a.robots, workload=a.workload, seed=a.seed,
                    duration=a.duration, window=(10.0, a.duration), rate_table=a.rate_table,
                    noise=a.noise)
    sim = _Recording(cfg)
    res = sim.run()
    h_out = sim.table.h_out
    groups: dict[tuple[float, bool], list[list[float]]] = defaultdict(list)
    prot: dict[tuple[float, bool], list[float]] = defaultdict(list)
    for r in sim.finished:
        if r.arrival < 10.0:
            continue
        ready = [r.arrival + cfg.cpu_prep, r.finished[0], r.finished[1]]
        waits = [r.issued[s] - ready[s] for s in range(3)]  # type: ignore[operator]
        runs = [r.finished[s] - r.issued[s] for s in range(3)]  # type: ignore[operator]
        server = r.finished[2] + h_out - r.arrival  # type: ignore[operator]
        late = server > r.budget - r.delta + 1e-12
        groups[(r.budget, late)].append([*waits, *runs, server])
        prot[(r.budget, late)].append(
            float(np.mean([sim.protected.get((r.request_id, s), False) for s in range(3)])))
    m = res.metrics
    print(f"{a.policy} {a.workload} N={a.robots}: attainment {m.attainment * 100:.2f}%, "
          f"per budget { {k: round(v * 100, 1) for k, v in m.per_budget.items()} }")
    print("budget late     n  waitV  waitP  waitA   runV   runP   runA  server  protected")
    for (b, late), rows in sorted(groups.items()):
        x = np.mean(rows, axis=0) * 1000
        print(f"{b * 1000:6.0f} {late!s:5} {len(rows):5d} " + " ".join(f"{v:6.1f}" for v in x[:6])
              + f" {x[6]:7.1f}  {np.mean(prot[(b, late)]):.2f}")
    _print_co_running(sim.finished, cfg, h_out)
    return 0


def _print_co_running(finished: list[Request], cfg: SimConfig, h_out: float) -> None:
    """Mean units of each budget class running alongside each class's requests.

    Time-weighted over each request's life from ViT issue to Action completion (its own
    unit excluded): tells interference from the request's own class (bunched arrivals)
    from interference by the other class (admitted ordinary work).
    """
    step = 5e-4
    start, end = 10.0, cfg.duration
    grid = np.arange(start, end, step)
    budgets = sorted({r.budget for r in finished})
    running = {b: np.zeros_like(grid) for b in budgets}
    for r in finished:
        for s in range(3):
            i0, i1 = np.searchsorted(grid, [r.issued[s], r.finished[s]])
            running[r.budget][i0:i1] += 1.0
    print("co-running units during a request's life (own unit excluded)")
    print("budget late     n  " + "  ".join(f"{b * 1000:6.0f}" for b in budgets))
    for b in budgets:
        for late in (False, True):
            rows = []
            for r in finished:
                if r.budget != b or r.arrival < start:
                    continue
                server = r.finished[2] + h_out - r.arrival  # type: ignore[operator]
                if (server > r.budget - r.delta + 1e-12) != late:
                    continue
                i0, i1 = np.searchsorted(grid, [r.issued[0], r.finished[2]])
                if i1 > i0:
                    rows.append([running[c][i0:i1].mean() - (c == b) for c in budgets])
            if rows:
                x = np.mean(rows, axis=0)
                print(f"{b * 1000:6.0f} {late!s:5} {len(rows):5d}  "
                      + "  ".join(f"{v:6.2f}" for v in x))


if __name__ == "__main__":
    raise SystemExit(main())
