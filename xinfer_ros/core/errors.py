"""Exception types of the scheduler core.

All derive from :class:`XInferError` (itself a ``ValueError``, since every one of them
reports bad input or an impossible event), so a driver can catch one base class.
"""

from __future__ import annotations

from xinfer_ros.errors import XInferRosError

__all__ = [
    "BudgetError",
    "InvalidRequestError",
    "RateTableError",
    "SchedulerStateError",
    "UnknownPolicyError",
    "XInferError",
]


class XInferError(XInferRosError, ValueError):
    """Base class of every error raised by ``xinfer_ros.core``."""


class InvalidRequestError(XInferError):
    """A request field is missing or out of range (e.g. a budget that is not > 0)."""


class BudgetError(InvalidRequestError):
    """A budget is not a number of milliseconds in the accepted range.

    Attributes:
        detail: The reason without the field name, for front ends that name the field
            their own way (openpi's ``xinfer/budget_ms``).
    """

    def __init__(self, detail: str) -> None:
        super().__init__(f"budget_ms: {detail}")
        self.detail = detail


class RateTableError(XInferError):
    """A rate-table file or object is malformed (missing or negative entries, bad schema)."""


class UnknownPolicyError(XInferError, KeyError):
    """``make_policy`` was asked for a policy name that is not registered."""

    def __str__(self) -> str:  # KeyError would otherwise repr() the message
        return str(self.args[0]) if self.args else ""


class SchedulerStateError(XInferError):
    """An event contradicts the policy's state.

    For example: completing a unit that is not running, time going backwards, or a
    duplicate request id.
    """
