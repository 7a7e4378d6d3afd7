"""Calibrated rates made consistent with "another running unit never speeds a unit up".

A calibration measures ρ_s(n) in short windows. On a shared CPU those windows can
disagree with physics: the batch table calibrated on 2026-12-04 (``--repeats 1``) put
an Action unit in a batch of two beside one ViT and one Prefill unit at ρ = 0.23 and
in a batch of three beside the same at 0.32. A predictor reading such a table prefers
the busier state, and admission prices launches by it. :func:`monotone_rates` replaces each rate
by the midpoint of two envelopes that respect the order: the least rate at or below
``n`` and the greatest at or above it. Both envelopes are non-increasing along every
edge of the order, so their midpoint is too, and a table that already respects the order
comes back unchanged.

The order: one more unit of another stage is always an edge. One more unit of the own
stage is an edge on an unbatched table (lanes time-share), and on a batch table only
while every unit of the stage still fits one batch (``max_batch`` units in all): past
that the units split into smaller batches, which may well run faster. A table with
batch factors (:mod:`~xinfer_ros.core.batch_cost`) has unbatched cells. ROS-free.
"""

from __future__ import annotations

from dataclasses import replace

from xinfer_ros.core.batch_cost import batch_factors, calibrated_max_batch
from xinfer_ros.core.rate_table import RateTable, Vec3
from xinfer_ros.core.stages import NUM_STAGES

__all__ = ["monotone_rates"]


def monotone_rates(table: RateTable) -> tuple[RateTable, int]:
    """``table`` with each stage's ρ_s non-increasing along the order above.

    Returns:
        The table, its provenance naming how many rates moved and the largest move
        (``table`` itself when none did), and the number of (entry, stage) rates moved.
    """
    # Cells of a table with batch factors are an unbatched table's (one unit per lane).
    max_batch = 1 if batch_factors(table) is not None else calibrated_max_batch(table)
    grid = sorted(table.rates)  # lexicographic: every predecessor of n comes before it
    new = {n: list(rho) for n, rho in table.rates.items()}
    moved, largest = 0, 0.0
    for s in range(NUM_STAGES):
        low: dict[Vec3, float] = {}
        for n in grid:
            low[n] = min([table.rates[n][s], *(low[m] for m in _below(n, s, max_batch))])
        high: dict[Vec3, float] = {}
        for n in reversed(grid):
            high[n] = max([table.rates[n][s],
                           *(high[m] for m in _above(n, s, max_batch, table.bounds))])
        for n in grid:
            value = (low[n] + high[n]) / 2
            if value != table.rates[n][s]:
                moved += 1
                largest = max(largest, abs(value - table.rates[n][s]))
                new[n][s] = value
    if not moved:
        return table, 0
    note = (f"rates made monotone (xinfer_ros.core.rate_monotone): {moved} rate(s) moved, "
            f"the largest by {largest:.3f}")
    return replace(table, rates={n: (r[0], r[1], r[2]) for n, r in new.items()},
                   provenance=f"{table.provenance}; {note}" if table.provenance else note), moved


def _own_edge(others: int, max_batch: int) -> bool:
    """Whether ``others`` -> ``others + 1`` units of the own stage is an edge of the order."""
    return max_batch == 1 or others + 2 <= max_batch


def _below(n: Vec3, s: int, max_batch: int) -> list[Vec3]:
    """The states one edge below ``n`` for stage ``s``'s rate."""
    out = []
    for k in range(NUM_STAGES):
        if n[k] == 0 or (k == s and not _own_edge(n[k] - 1, max_batch)):
            continue
        out.append(_step(n, k, -1))
    return out


def _above(n: Vec3, s: int, max_batch: int, bounds: Vec3) -> list[Vec3]:
    """The states one edge above ``n`` for stage ``s``'s rate."""
    out = []
    for k in range(NUM_STAGES):
        if n[k] == bounds[k] or (k == s and not _own_edge(n[k], max_batch)):
            continue
        out.append(_step(n, k, 1))
    return out


def _step(n: Vec3, k: int, by: int) -> Vec3:
    return (n[0] + by * (k == 0), n[1] + by * (k == 1), n[2] + by * (k == 2))
