"""Declared, described and validated node parameters."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rcl_interfaces.msg import FloatingPointRange, IntegerRange, ParameterDescriptor
from rclpy.node import Node

__all__ = ["ParamSpec", "declare_params"]


@dataclass(frozen=True)
class ParamSpec:
    """One node parameter.

    Attributes:
        name: Parameter name.
        default: Default value; its type is the parameter's type.
        description: What it means, with its unit.
        low: Inclusive lower bound for numbers (``None``: unbounded).
        high: Inclusive upper bound for numbers.
        choices: Allowed values for strings (``None``: any).
        check: Extra validation returning an error text or ``None``.
    """

    name: str
    default: Any
    description: str
    low: float | None = None
    high: float | None = None
    choices: tuple[str, ...] | None = None
    check: Callable[[Any], str | None] | None = None

    def descriptor(self) -> ParameterDescriptor:
        """The ROS descriptor, with a range where one applies."""
        desc = ParameterDescriptor(description=self.description, read_only=True)
        if self.choices:
            desc.additional_constraints = "one of: " + ", ".join(self.choices)
        if isinstance(self.default, bool):
            return desc
        if isinstance(self.default, int) and self.low is not None and self.high is not None:
            desc.integer_range = [IntegerRange(
                from_value=int(self.low), to_value=int(self.high), step=1)]
        elif isinstance(self.default, float) and self.low is not None and self.high is not None:
            desc.floating_point_range = [FloatingPointRange(
                from_value=float(self.low), to_value=float(self.high), step=0.0)]
        return desc

    def validate(self, value: Any) -> None:
        """Raise ``ValueError`` naming the parameter when ``value`` is not acceptable."""
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if math.isnan(value):
                raise ValueError(f"parameter {self.name!r} is NaN")
            if self.low is not None and value < self.low:
                raise ValueError(f"parameter {self.name!r}={value} is below {self.low}")
            if self.high is not None and value > self.high:
                raise ValueError(f"parameter {self.name!r}={value} is above {self.high}")
        if self.choices is not None and value not in self.choices:
            raise ValueError(
                f"parameter {self.name!r}={value!r} is not one of {list(self.choices)}")
        if self.check is not None and (error := self.check(value)):
            raise ValueError(f"parameter {self.name!r}: {error}")


def declare_params(node: Node, specs: list[ParamSpec]) -> dict[str, Any]:
    """Declare ``specs`` on ``node``, validate the values and return them by name.

    Raises:
        ValueError: On the first invalid value, naming the parameter.
    """
    values: dict[str, Any] = {}
    for spec in specs:
        value = node.declare_parameter(spec.name, spec.default, spec.descriptor()).value
        spec.validate(value)
        values[spec.name] = value
    return values
