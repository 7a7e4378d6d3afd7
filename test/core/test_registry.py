"""make_policy: names, ablation presets, unknown names."""

from __future__ import annotations

import pytest

from xinfer_ros.core import (
    EDFPolicy,
    SlackGatePolicy,
    UnknownPolicyError,
    XInferPolicy,
    make_policy,
    policy_names,
)


def test_known_names():
    assert set(policy_names()) >= {"fifo", "edf", "slack_gate", "xinfer"}
    assert isinstance(make_policy("EDF", limits=(1, 1, 1)), EDFPolicy)
    assert make_policy("slack-gate", threshold=0.02).threshold == 0.02
    assert isinstance(make_policy("slack_gate"), SlackGatePolicy)


@pytest.mark.parametrize("name, attr, value", [
    ("xinfer_no_interference", "predictor.interference", False),
    ("xinfer_strict_priority", "strict_priority", True),
    ("xinfer_no_arrival", "arrival_aware", False),
    ("xinfer_entry_only", "entry_only", True),
    ("xinfer_zero_slack", "zero_slack_promotion", True),
    ("xinfer_spread", "arrival_projection", True),
    ("xinfer_spread", "slot_aware", False),
])
def test_ablation_presets(name, attr, value):
    p = make_policy(name)
    assert isinstance(p, XInferPolicy)
    obj = p
    for part in attr.split("."):
        obj = getattr(obj, part)
    assert obj is value


def test_unknown_name_is_rejected_naming_it():
    with pytest.raises(UnknownPolicyError, match=r"unknown policy 'sjf'; known: fifo, edf"):
        make_policy("sjf")


def test_unknown_parameter_is_a_type_error():
    with pytest.raises(TypeError):
        make_policy("fifo", threshold=0.04)
