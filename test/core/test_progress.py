"""The shared progress model (Eq. 8-9) and its three users agreeing on it."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from xinfer_ros.core.progress import finish_time, others, progress
from xinfer_ros.core.rate_table import default_rate_table
from xinfer_ros.sim.gpu import GpuModel


def test_no_work_during_the_issue_overhead() -> None:
    assert progress(0.5, compute_start=1.0, last=0.0, t=0.9) == 0.0
    assert progress(0.5, compute_start=1.0, last=0.0, t=1.4) == pytest.approx(0.2)
    # Already accounted up to t: nothing more.
    assert progress(0.5, compute_start=1.0, last=2.0, t=1.5) == 0.0


@given(st.floats(0.05, 2.0), st.floats(0.0, 1.0), st.lists(st.floats(0.0, 1.0), max_size=8))
def test_piecewise_integration_adds_up(rate: float, start: float, cuts: list[float]) -> None:
    end = 2.0
    last, done = 0.0, 0.0
    for t in [*sorted(cuts), end]:
        done += progress(rate, start, last, t)
        last = max(last, t)
    assert done == pytest.approx(rate * (end - start))


def test_finish_time_waits_for_the_compute_start() -> None:
    assert finish_time(0.5, compute_start=1.0, work_left=0.1, t=0.0) == pytest.approx(1.2)
    assert finish_time(0.5, compute_start=1.0, work_left=0.1, t=3.0) == pytest.approx(3.2)
    assert finish_time(0.5, compute_start=1.0, work_left=-0.1, t=3.0) == 3.0
    assert others([2, 1, 3], 1) == (2, 0, 3)


def test_simulated_gpu_runs_one_unit_for_its_table_time() -> None:
    table = default_rate_table()
    gpu = GpuModel(table.rate, table.work, table.overhead, (4, 4, 6))
    gpu.issue("a", 0, 0.0)
    alone = table.overhead[0] + table.work[0] / table.rate(0, (0, 0, 0))
    assert gpu.next_finish == pytest.approx(alone)
    # A second unit slows the first from its own compute start on.
    gpu.issue("b", 2, 0.001)
    assert gpu.next_finish > alone
