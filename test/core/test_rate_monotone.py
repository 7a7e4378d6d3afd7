"""Measured rates made monotone: another running unit never speeds a unit up."""

from __future__ import annotations

from collections.abc import Iterator

from hypothesis import given, settings
from hypothesis import strategies as st

from xinfer_ros.core.rate_monotone import monotone_rates
from xinfer_ros.core.rate_table import (
    DEFAULT_BATCH_RATE_TABLE_PATH,
    RateTable,
    Vec3,
    default_rate_table,
    resolve_rate_table,
)

BOUNDS: Vec3 = (2, 2, 3)


def _table(rates: dict[Vec3, tuple[float, float, float]], max_batch: int = 1) -> RateTable:
    model = {"settings": {"max_batch": max_batch}} if max_batch > 1 else {}
    return RateTable(work=(0.002, 0.003, 0.035), overhead=(0.0, 0.0, 0.0), h_out=0.0,
                     bounds=BOUNDS, rates=rates, provenance="test", model=model)


def _grid() -> list[Vec3]:
    return [(v, p, a) for v in range(BOUNDS[0] + 1) for p in range(BOUNDS[1] + 1)
            for a in range(BOUNDS[2] + 1)]


def _edges(s: int, max_batch: int) -> Iterator[tuple[Vec3, Vec3]]:
    """(n, n + one unit) pairs along which stage ``s``'s rate may not rise."""
    for n in _grid():
        for k in range(3):
            if n[k] == BOUNDS[k]:
                continue
            if k == s and max_batch > 1 and n[k] + 2 > max_batch:
                continue  # the stage's units split into smaller batches: not an edge
            up = (n[0] + (k == 0), n[1] + (k == 1), n[2] + (k == 2))
            yield n, up


def _violations(table: RateTable, max_batch: int) -> list[tuple[int, Vec3, Vec3]]:
    return [(s, n, up) for s in range(3) for n, up in _edges(s, max_batch)
            if table.rates[up][s] > table.rates[n][s] + 1e-12]


rates_st = st.lists(st.floats(0.05, 1.0), min_size=3 * len(_grid()),
                    max_size=3 * len(_grid()))


@settings(max_examples=60, deadline=None)
@given(values=rates_st, max_batch=st.sampled_from([1, 2, 4]))
def test_any_table_comes_out_monotone_and_within_its_range(values: list[float],
                                                           max_batch: int) -> None:
    it = iter(values)
    rates = {n: (next(it), next(it), next(it)) for n in _grid()}
    out, moved = monotone_rates(_table(rates, max_batch))
    assert _violations(out, max_batch) == []
    assert all(min(values) <= r <= max(values) for rho in out.rates.values() for r in rho)
    changed = sum(out.rates[n][s] != rates[n][s] for n in _grid() for s in range(3))
    assert moved == changed
    assert (moved > 0) == bool(_violations(_table(rates, max_batch), max_batch))


def test_tables_that_respect_the_order_come_back_unchanged() -> None:
    # The paper's interference model and its batch model are monotone by construction
    # (a batch model only along the edges within one batch).
    for table in (default_rate_table(), resolve_rate_table(DEFAULT_BATCH_RATE_TABLE_PATH)):
        out, moved = monotone_rates(table)
        assert moved == 0 and out is table


def test_a_busier_state_measured_faster_is_pulled_into_order() -> None:
    # As calibrated on the CPU (batches of up to 4): an Action unit in a batch of two
    # beside one ViT and one Prefill unit at 0.23, in a batch of three beside the same
    # at 0.32. Everything else follows a smooth model.
    def smooth(n: Vec3) -> tuple[float, float, float]:
        r = 1.0 / (1.0 + 0.3 * sum(n))
        return (r, r, r)

    rates = {n: smooth(n) for n in _grid()}
    rates[(1, 1, 1)] = (*rates[(1, 1, 1)][:2], 0.23)
    rates[(1, 1, 2)] = (*rates[(1, 1, 2)][:2], 0.32)
    out, moved = monotone_rates(_table(rates, max_batch=4))
    assert out.rates[(1, 1, 2)][2] <= out.rates[(1, 1, 1)][2]
    # Only the Action column of the states the outlier pair orders moves.
    assert moved >= 2 and all(out.rates[n][:2] == rates[n][:2] for n in _grid())
    assert "rates made monotone" in out.provenance and out.provenance.startswith("test; ")


def test_a_batch_table_may_run_split_batches_faster() -> None:
    # With max_batch 2, three Action units run as batches of two and one: the lone unit
    # may well be faster than a member of a full batch, so that is left as measured.
    def smooth(n: Vec3) -> tuple[float, float, float]:
        r = 1.0 / (1.0 + 0.3 * sum(n))
        return (r, r, r)

    rates = {n: smooth(n) for n in _grid()}
    for v in range(BOUNDS[0] + 1):
        for p in range(BOUNDS[1] + 1):
            base = rates[(v, p, 1)]
            rates[(v, p, 2)] = (*rates[(v, p, 2)][:2], base[2] + 0.05)
            rates[(v, p, 3)] = (*rates[(v, p, 3)][:2], base[2] + 0.05)
    _, moved = monotone_rates(_table(rates, max_batch=2))
    assert moved == 0
    _, moved = monotone_rates(_table(rates, max_batch=1))  # lanes time-share: not physical
    assert moved > 0
