"""Run-time control requests both servers accept: switching the scheduling policy.

The ROS ``~/set_policy`` service carries the policy's keyword arguments as two string
lists; they are checked and typed here, without ROS, so a malformed request is refused
with a reason before the engine builds anything.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from xinfer_ros.errors import XInferRosError

__all__ = ["PolicySwitchError", "parse_value", "policy_arguments"]


class PolicySwitchError(XInferRosError, ValueError):
    """A policy switch request that cannot be carried out as written."""


def parse_value(text: str) -> Any:
    """A parameter value written as text: an int, a float, a bool or else the text."""
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return {"true": True, "false": False}.get(text.lower(), text)


def policy_arguments(policy: str, names: Sequence[str], values: Sequence[str],
                     known: Sequence[str]) -> dict[str, Any]:
    """The keyword arguments of a switch to ``policy``.

    Args:
        policy: The policy asked for.
        names: Its argument names.
        values: Their values as text, one per name.
        known: The policies the server runs.

    Raises:
        PolicySwitchError: An unknown policy, or names and values of different lengths.
    """
    if policy not in known:
        raise PolicySwitchError(f"unknown policy {policy!r}; choose one of {list(known)}")
    if len(names) != len(values):
        raise PolicySwitchError("parameter_names and parameter_values differ in length")
    return {k: parse_value(v) for k, v in zip(names, values, strict=True)}
