"""Declared, described and validated node parameters.

Every invalid value (out of range, of the wrong type, an integer where a float is
declared, an unknown choice) raises ``ValueError`` with one line naming the parameter
and what it accepts; :func:`xinfer_ros.nodes.runtime.spin_node` turns it into exit
status 2.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rcl_interfaces.msg import FloatingPointRange, IntegerRange, ParameterDescriptor
from rclpy.exceptions import ParameterException
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

    def allowed(self) -> str:
        """What the parameter accepts, in words."""
        if self.choices is not None:
            return f"one of {list(self.choices)}"
        kind = {bool: "true or false", int: "an integer", float: "a float (e.g. 1.0, not 1)",
                str: "a string", list: "a list"}.get(type(self.default), "a value")
        if self.low is not None and self.high is not None:
            return f"{kind} in [{self.low:g}, {self.high:g}]"
        return kind

    def validate(self, value: Any) -> None:
        """Raise ``ValueError`` naming the parameter when ``value`` is not acceptable."""
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if number and (math.isnan(value) or (self.low is not None and value < self.low)
                       or (self.high is not None and value > self.high)):
            raise ValueError(f"parameter {self.name!r}={value} is out of range: "
                             f"{self.allowed()}")
        if self.choices is not None and value not in self.choices:
            raise ValueError(f"parameter {self.name!r}={value!r}: {self.allowed()}")
        if self.check is not None and (error := self.check(value)):
            raise ValueError(f"parameter {self.name!r}: {error}")


def declare_params(node: Node, specs: list[ParamSpec]) -> dict[str, Any]:
    """Declare ``specs`` on ``node``, validate the values and return them by name.

    Raises:
        ValueError: On the first invalid value, naming the parameter.
    """
    values: dict[str, Any] = {}
    for spec in specs:
        try:
            value = node.declare_parameter(spec.name, spec.default, spec.descriptor()).value
        except ParameterException as exc:
            # rclpy's text: "Trying to set parameter 'x' to '1' of type 'INTEGER', ..."
            given = str(exc).split(" to ", 1)[-1].split(", expecting", 1)[0]
            raise ValueError(f"parameter {spec.name!r} cannot be {given}: "
                             f"{spec.allowed()}") from None
        spec.validate(value)
        values[spec.name] = value
    return values
