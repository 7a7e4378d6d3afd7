"""The timing contract: deadline, Eq. 1, budget met, and the ms boundary."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from xinfer_ros.core.constants import DELTA, SEND_PERIOD
from xinfer_ros.core.errors import BudgetError
from xinfer_ros.core.request import Request
from xinfer_ros.core.timing import budget_met, budget_seconds, deadline, next_send

_times = st.floats(min_value=0.0, max_value=1e6, allow_nan=False)
_spans = st.floats(min_value=0.0, max_value=10.0, allow_nan=False)


def test_deadline_reserves_delta_outside_the_server() -> None:
    assert deadline(1.0, 0.090) == pytest.approx(1.0 + 0.090 - DELTA)
    assert deadline(1.0, 0.090, delta=0.0) == pytest.approx(1.090)
    # The scheduler's requests use the same contract.
    assert Request(1, "r", arrival=1.0, budget=0.090).deadline == deadline(1.0, 0.090)


@given(_times, _spans, _spans)
def test_next_send_is_eq1(last: float, wait: float, period: float) -> None:
    response = last + wait
    nxt = next_send(last, response, period)
    # Never sooner than T_E after the last send, never before the response arrived,
    # and exactly one of the two.
    assert nxt >= last + period and nxt >= response
    assert nxt in (last + period, response)


def test_next_send_defaults_to_the_paper_period() -> None:
    assert next_send(10.0, 10.05) == pytest.approx(10.0 + SEND_PERIOD)
    assert next_send(10.0, 10.5) == 10.5


def test_budget_met_leaves_the_reserve() -> None:
    assert budget_met(0.090 - DELTA, 0.090)
    assert not budget_met(0.090 - DELTA + 1e-6, 0.090)


@pytest.mark.parametrize("value", [150, 150.0, np.float32(150.0), np.int64(150)])
def test_budget_seconds_accepts_numbers(value: object) -> None:
    assert budget_seconds(value) == pytest.approx(0.150)


@pytest.mark.parametrize("value", [True, np.bool_(True), "150", None, [150.0]])
def test_budget_seconds_refuses_non_numbers(value: object) -> None:
    with pytest.raises(BudgetError, match="expected a number of ms"):
        budget_seconds(value)


@pytest.mark.parametrize("value", [0.0, -1.0, math.nan, math.inf, 20_000.0])
def test_budget_seconds_refuses_out_of_range(value: float) -> None:
    with pytest.raises(BudgetError, match=r"outside \(0, 10000\] ms"):
        budget_seconds(value, max_ms=10_000.0)
