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
    got = policy_arguments("xinfer", ["frontend_reserve", "slot_aware", "delta"],
                           ["0.01", "false", "0"], SERVED_POLICIES)
    assert got == {"frontend_reserve": 0.01, "slot_aware": False, "delta": 0.0}
    assert type(got["delta"]) is float


@pytest.mark.parametrize(("policy", "names", "values", "needle"), [
    ("nope", [], [], "unknown policy 'nope'; choose one of"),
    ("edf", ["a", "b"], ["1"], "differ in length"),
    ("xinfer", ["frontend_reserve"], ["-1000"], r"frontend_reserve=-1000 is out of range \[0,"),
    ("xinfer", ["delta"], ["nan"], "delta=nan is out of range"),
    ("xinfer", ["phase_budget"], ["0"], r"phase_budget=0 is out of range \(0, 3600\]"),
    ("xinfer", ["frontend_reserve"], ["1e9"], "out of range"),
    ("xinfer", ["frontend_reserve"], ["soon"], "must be a number, got 'soon'"),
    ("xinfer", ["slot_aware"], ["1"], "slot_aware must be true or false, got 1"),
    ("edf", ["limits_v"], ["3"], "unknown policy argument 'limits_v'; set_policy accepts"),
])
def test_malformed_switches_are_refused_with_a_reason(policy: str, names: list[str],
                                                     values: list[str], needle: str) -> None:
    with pytest.raises(PolicySwitchError, match=needle) as info:
        policy_arguments(policy, names, values, SERVED_POLICIES)
    assert isinstance(info.value, XInferRosError) and isinstance(info.value, ValueError)


def test_admission_records_are_bounded() -> None:
    from xinfer_ros.core.xinfer_policy import MAX_ADMISSION_RECORDS, XInferPolicy

    policy = XInferPolicy(**policy_arguments("xinfer", ["record_admissions"], ["true"],
                                             SERVED_POLICIES))
    assert policy.record_admissions and policy.admissions.maxlen == MAX_ADMISSION_RECORDS
