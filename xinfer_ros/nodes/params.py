"""Declared, described and validated node parameters.

The tables are plain data (:class:`xinfer_ros.serving.params.ParamSpec`); this module
declares them on a node. Every invalid value (out of range, of the wrong type, an
integer where a float is declared, an unknown choice) raises ``ValueError`` with one
line naming the parameter and what it accepts; :func:`xinfer_ros.nodes.runtime.spin_node`
turns it into exit status 2.
"""

from __future__ import annotations

from collections.abc import Sequence

from rcl_interfaces.msg import FloatingPointRange, IntegerRange, ParameterDescriptor
from rclpy.exceptions import ParameterException
from rclpy.node import Node

from xinfer_ros.fleet.plan import PlanError, parse_robots
from xinfer_ros.serving.params import Params, ParamSpec

__all__ = ["ParamSpec", "declare_params", "descriptor", "robot_names"]


def descriptor(spec: ParamSpec) -> ParameterDescriptor:
    """The ROS descriptor of ``spec``, with a range where one applies."""
    desc = ParameterDescriptor(description=spec.description, read_only=True)
    if spec.choices:
        desc.additional_constraints = "one of: " + ", ".join(spec.choices)
    if isinstance(spec.default, bool):
        return desc
    if isinstance(spec.default, int) and spec.low is not None and spec.high is not None:
        desc.integer_range = [IntegerRange(
            from_value=int(spec.low), to_value=int(spec.high), step=1)]
    elif isinstance(spec.default, float) and spec.low is not None and spec.high is not None:
        desc.floating_point_range = [FloatingPointRange(
            from_value=float(spec.low), to_value=float(spec.high), step=0.0)]
    return desc


def declare_params(node: Node, specs: list[ParamSpec]) -> Params:
    """Declare ``specs`` on ``node``, validate the values and return them by name.

    Raises:
        ValueError: On the first invalid value, naming the parameter.
    """
    values: Params = {}
    for spec in specs:
        try:
            value: object = node.declare_parameter(spec.name, spec.default,
                                                   descriptor(spec)).value
        except ParameterException as exc:
            # rclpy's text: "Trying to set parameter 'x' to '1' of type 'INTEGER', ..."
            given = str(exc).split(" to ", 1)[-1].split(", expecting", 1)[0]
            raise ValueError(f"parameter {spec.name!r} cannot be {given}: "
                             f"{spec.allowed()}") from None
        spec.validate(value)
        values[spec.name] = value
    return values


def robot_names(value: Sequence[str]) -> list[str]:
    """The robot namespaces of a node's ``robots`` parameter.

    Raises:
        ValueError: Naming the parameter, when :func:`parse_robots` refuses the list.
    """
    try:
        return parse_robots(list(value))
    except PlanError as exc:
        raise ValueError(f"parameter 'robots' is invalid: {exc}") from None
