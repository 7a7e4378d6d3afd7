"""The request timing contract of the paper, written once.

Every driver (simulator, engine closed loop, inference server, RTC executor, bag
replayer, benchmarks) computes a request's deadline, a robot's next send time (Eq. 1)
and whether a response met its budget through these functions, so a change to the
contract is made here and nowhere else.

Units: seconds throughout. Budgets cross the message boundary (ROS ``budget_ms``, the
openpi ``xinfer/budget_ms`` key) in milliseconds and become seconds once, there, in
:func:`budget_seconds`, the one validation of a budget on its way in; inside (the
engine's ``submit``, the simulator, the policies) they stay seconds, and a request's
own invariants (:class:`~xinfer_ros.core.request.Request`) refuse a budget that is no
positive finite number.
"""

from __future__ import annotations

import math
from numbers import Real
from typing import overload

import numpy as np

from xinfer_ros.core.constants import DELTA, SEND_PERIOD
from xinfer_ros.core.errors import BudgetError

__all__ = [
    "MS_PER_S",
    "budget_met",
    "budget_seconds",
    "deadline",
    "next_send",
]

#: Milliseconds per second: the one conversion factor at the message boundary.
MS_PER_S = 1000.0


def deadline(arrival: float, budget: float, delta: float = DELTA) -> float:
    """Scheduling deadline ℓ_j = a_j + b_j − δ of a request (s).

    Args:
        arrival: Arrival time a_j at the server (s).
        budget: Response-time budget b_j (s).
        delta: Time reserved outside the server δ (s).
    """
    return arrival + budget - delta


def next_send(last_send: float, response: float, period: float = SEND_PERIOD) -> float:
    """Eq. 1: a robot's next send time ``max(s_j + T_E, r_j)`` (s).

    Args:
        last_send: Send time s_j of the robot's previous request (s).
        response: Time r_j its response arrived, or the current time while it is
            still awaited (s).
        period: Minimum send period T_E (s).
    """
    return max(last_send + period, response)


@overload
def budget_met(server_span: float, budget: float, delta: float = DELTA) -> bool: ...


@overload
def budget_met(server_span: np.ndarray, budget: np.ndarray,
               delta: float = DELTA) -> np.ndarray: ...


def budget_met(server_span: float | np.ndarray, budget: float | np.ndarray,
               delta: float = DELTA) -> bool | np.ndarray:
    """Whether a response the server produced in ``server_span`` meets ``budget``.

    The reserve δ is spent outside the server, so the server meets the budget when its
    own span leaves that reserve: ``span + δ <= b``. Element by element on arrays.
    """
    return server_span + delta <= budget


def budget_seconds(budget_ms: object, max_ms: float = math.inf) -> float:
    """Validate a budget given in milliseconds and return it in seconds.

    Args:
        budget_ms: The budget as a message carries it (ms).
        max_ms: Largest accepted budget (ms).

    Raises:
        BudgetError: When ``budget_ms`` is not a real number (bools are not) or lies
            outside ``(0, max_ms]``.
    """
    if isinstance(budget_ms, bool) or not isinstance(budget_ms, Real):
        raise BudgetError(f"expected a number of ms, got {budget_ms!r}")
    value = float(budget_ms)
    if not (math.isfinite(value) and 0.0 < value <= max_ms):
        upper = "inf)" if math.isinf(max_ms) else f"{max_ms:g}]"
        raise BudgetError(f"{value} outside (0, {upper} ms")
    return value / MS_PER_S
