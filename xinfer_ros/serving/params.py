"""Parameter tables as plain data: names, defaults, ranges, checks (no ROS import).

A node declares its table with ROS (:func:`xinfer_ros.nodes.params.declare_params`);
a ROS-free tool (``xinfer-serve``) reads the same table from the same parameter file
(:func:`read_param_file`, :func:`resolve_params`). Either way, every invalid value
raises ``ValueError`` with one line naming the parameter and what it accepts.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeAlias

import yaml

__all__ = ["EXECUTORS", "EXECUTOR_PARAM", "ParamSpec", "ParamValue", "Params", "read_param_file",
           "resolve_params"]

#: What a ROS parameter holds: a scalar or a list of one scalar type.
ParamValue: TypeAlias = (bool | int | float | str
                         | list[bool] | list[int] | list[float] | list[str])
#: A node's resolved parameters by name. Each value has its spec's type, which one dict
#: type cannot say per key: readers take it as that type (the table checked it).
Params: TypeAlias = dict[str, Any]


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
    default: ParamValue
    description: str
    low: float | None = None
    high: float | None = None
    choices: tuple[str, ...] | None = None
    check: Callable[[Any], str | None] | None = None

    def allowed(self) -> str:
        """What the parameter accepts, in words."""
        if self.choices is not None:
            return f"one of {list(self.choices)}"
        kind = {bool: "true or false", int: "an integer", float: "a float (e.g. 1.0, not 1)",
                str: "a string", list: "a list"}.get(type(self.default), "a value")
        if self.low is not None and self.high is not None:
            return f"{kind} in [{self.low:g}, {self.high:g}]"
        return kind

    def has_type(self, value: object) -> bool:
        """Whether ``value`` has the parameter's type, as ROS decides it.

        ROS types a parameter by its default: an integer is no float (``1`` for a
        float parameter is refused), a boolean no integer, and a list holds one type.
        """
        return _same_type(self.default, value)

    def validate(self, value: object) -> None:
        """Raise ``ValueError`` naming the parameter when ``value`` is not acceptable."""
        if isinstance(value, (int, float)) and not isinstance(value, bool) and (
                math.isnan(value) or (self.low is not None and value < self.low)
                or (self.high is not None and value > self.high)):
            raise ValueError(f"parameter {self.name!r}={value} is out of range: "
                             f"{self.allowed()}")
        if self.choices is not None and value not in self.choices:
            raise ValueError(f"parameter {self.name!r}={value!r}: {self.allowed()}")
        if self.check is not None and (error := self.check(value)):
            raise ValueError(f"parameter {self.name!r}: {error}")


def _same_type(default: ParamValue, value: object) -> bool:
    if isinstance(default, list):
        if not isinstance(value, list):
            return False
        kinds = {type(v) for v in default}
        return not kinds or all(type(v) in kinds for v in value)
    return type(value) is type(default)


#: Executors a node can run under (its ``executor`` parameter).
EXECUTORS = ("events", "single")

#: The ``executor`` parameter: a node that declares it is spun by that executor.
EXECUTOR_PARAM = ParamSpec(
    "executor", "events",
    "rclpy executor: 'events' (rclpy.experimental.EventsExecutor: dispatch in C++, no "
    "wait set rebuilt per message) or 'single' (SingleThreadedExecutor)",
    choices=EXECUTORS)


def _flatten(values: Mapping[str, object], prefix: str = "") -> dict[str, object]:
    """ROS parameter-file nesting (``torch: {slots: ...}``) as dotted names."""
    flat: dict[str, object] = {}
    for key, value in values.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(_flatten(value, f"{name}."))
        else:
            flat[name] = value
    return flat


def read_param_file(path: str | Path, node: str) -> dict[str, object]:
    """The parameters a ROS parameter file gives ``node``, by dotted name.

    Reads the ``node`` and ``/**`` sections' ``ros__parameters`` (a node section wins).

    Raises:
        ValueError: When the file cannot be read or a section is not a mapping.
    """
    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise ValueError(f"cannot read parameter file {path}: {exc}") from None
    if not isinstance(data, Mapping):
        raise ValueError(f"parameter file {path}: expected a mapping of node names")
    values: dict[str, object] = {}
    for section in ("/**", node, f"/{node}"):
        entry = data.get(section)
        if entry is None:
            continue
        params = entry.get("ros__parameters") if isinstance(entry, Mapping) else None
        if not isinstance(params, Mapping):
            raise ValueError(f"parameter file {path}: {section}: expected a "
                             "ros__parameters mapping")
        values.update(_flatten(params))
    return values


def resolve_params(specs: Sequence[ParamSpec], given: Mapping[str, object],
                   source: str) -> Params:
    """Every parameter of ``specs``: the given value where there is one, else its default.

    Args:
        specs: The node's parameter table.
        given: Values by name (e.g. :func:`read_param_file`'s).
        source: Where ``given`` came from, for the error line (a file name).

    Raises:
        ValueError: On a name the table does not have, a value of the wrong type or one
            its spec refuses; one line naming ``source`` and the parameter.
    """
    table = {spec.name: spec for spec in specs}
    unknown = sorted(set(given) - set(table))
    if unknown:
        raise ValueError(f"{source}: unknown parameter {unknown[0]!r} (not one of this "
                         "node's; a typo would otherwise be ignored)")
    values: Params = {}
    for name, spec in table.items():
        value = given.get(name, spec.default)
        if not spec.has_type(value):
            raise ValueError(f"{source}: parameter {name!r} cannot be {value!r}: "
                             f"{spec.allowed()}")
        try:
            spec.validate(value)
        except ValueError as exc:
            raise ValueError(f"{source}: {exc}") from None
        values[name] = value
    return values
