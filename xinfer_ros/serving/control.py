"""Run-time control requests both servers accept: switching the scheduling policy.

The ROS ``~/set_policy`` service carries the policy's keyword arguments as two string
lists; they are checked and typed here, without ROS, so a malformed request is refused
with a reason before the engine builds anything. Only the arguments of
:data:`POLICY_ARGUMENTS` are accepted, each of its type and in its range (a
``frontend_reserve`` of -1000 s is finite, and nonsense).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from xinfer_ros.core.constants import MAX_BUDGET
from xinfer_ros.errors import XInferRosError

__all__ = ["POLICY_ARGUMENTS", "ArgumentSpec", "PolicySwitchError", "parse_value",
           "policy_arguments"]


@dataclass(frozen=True)
class ArgumentSpec:
    """What a policy argument sent over ``set_policy`` may be.

    Attributes:
        kind: ``bool`` or ``float`` (an int is taken as a float).
        low: Smallest accepted value (floats).
        high: Largest accepted value (floats).
        open_low: ``low`` itself is refused (the value must exceed it).
    """

    kind: type
    low: float = 0.0
    high: float = 0.0
    open_low: bool = False

    def check(self, name: str, value: object) -> bool | float:
        """``value`` as the argument's type, or :class:`PolicySwitchError` naming it."""
        if self.kind is bool:
            if not isinstance(value, bool):
                raise PolicySwitchError(f"{name} must be true or false, got {value!r}")
            return value
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise PolicySwitchError(f"{name} must be a number, got {value!r}")
        low_ok = value > self.low if self.open_low else value >= self.low
        if not (low_ok and value <= self.high):  # NaN fails both
            bracket = "(" if self.open_low else "["
            raise PolicySwitchError(f"{name}={value} is out of range "
                                    f"{bracket}{self.low:g}, {self.high:g}]")
        return float(value)


_FLAG = ArgumentSpec(bool)
#: Arguments ``set_policy`` accepts (a policy that does not take one refuses it when
#: built). Times are in seconds; none may exceed the largest budget.
POLICY_ARGUMENTS: dict[str, ArgumentSpec] = {
    **{name: _FLAG for name in (
        "interference", "strict_priority", "arrival_aware", "entry_only",
        "zero_slack_promotion", "slot_aware", "arrival_projection", "forecast_load",
        "record_admissions")},
    "frontend_reserve": ArgumentSpec(float, 0.0, MAX_BUDGET),
    "delta": ArgumentSpec(float, 0.0, MAX_BUDGET),
    "phase_budget": ArgumentSpec(float, 0.0, MAX_BUDGET, open_low=True),
    "forecast_window": ArgumentSpec(float, 0.0, MAX_BUDGET, open_low=True),
}


class PolicySwitchError(XInferRosError, ValueError):
    """A policy switch request that cannot be carried out as written."""


def parse_value(text: str) -> int | float | bool | str:
    """A parameter value written as text: an int, a float, a bool or else the text."""
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return {"true": True, "false": False}.get(text.lower(), text)


def policy_arguments(policy: str, names: Sequence[str], values: Sequence[str],
                     known: Sequence[str]) -> dict[str, bool | float]:
    """The keyword arguments of a switch to ``policy``.

    Args:
        policy: The policy asked for.
        names: Its argument names.
        values: Their values as text, one per name.
        known: The policies the server runs.

    Raises:
        PolicySwitchError: An unknown policy, names and values of different lengths, an
            argument not in :data:`POLICY_ARGUMENTS`, or a value of the wrong type or
            out of its range.
    """
    if policy not in known:
        raise PolicySwitchError(f"unknown policy {policy!r}; choose one of {list(known)}")
    if len(names) != len(values):
        raise PolicySwitchError("parameter_names and parameter_values differ in length")
    out: dict[str, bool | float] = {}
    for name, text in zip(names, values, strict=True):
        spec = POLICY_ARGUMENTS.get(name)
        if spec is None:
            raise PolicySwitchError(f"unknown policy argument {name!r}; set_policy accepts "
                                    f"{sorted(POLICY_ARGUMENTS)}")
        out[name] = spec.check(name, parse_value(text))
    return out
