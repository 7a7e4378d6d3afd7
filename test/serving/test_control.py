"""Policy switch requests, checked without ROS."""

from __future__ import annotations

import pytest

from xinfer_ros.core.registry import SERVED_POLICIES
from xinfer_ros.errors import XInferRosError
from xinfer_ros.serving.control import PolicySwitchError, parse_value, policy_arguments


@pytest.mark.parametrize(("text", "value"), [
    ("3", 3), ("0.02", 0.02), ("-1e-3", -1e-3), ("true", True), ("False", False),
    ("fifo", "fifo"), ("", ""),
])
def test_values_are_typed_as_written(text: str, value: object) -> None:
    got = parse_value(text)
    assert got == value and type(got) is type(value)


def test_arguments_of_a_known_policy() -> None:
    assert policy_arguments("edf", ["limits_v", "strict"], ["3", "true"], SERVED_POLICIES) == \
        {"limits_v": 3, "strict": True}


@pytest.mark.parametrize(("policy", "names", "values", "needle"), [
    ("nope", [], [], "unknown policy 'nope'; choose one of"),
    ("edf", ["a", "b"], ["1"], "differ in length"),
])
def test_malformed_switches_are_refused_with_a_reason(policy: str, names: list[str],
                                                     values: list[str], needle: str) -> None:
    with pytest.raises(PolicySwitchError, match=needle) as info:
        policy_arguments(policy, names, values, SERVED_POLICIES)
    assert isinstance(info.value, XInferRosError) and isinstance(info.value, ValueError)
