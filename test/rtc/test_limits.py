import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from xinfer_ros.rtc.limits import CommandLimits, LimitsError, limits_from_yaml

DT = 0.03
NAMES = ["shoulder", "elbow"]


def test_limits_contradicting_each_other_are_refused_naming_the_joint() -> None:
    with pytest.raises(LimitsError, match="'elbow': min_position 2 exceeds max_position 1"):
        CommandLimits.build(2, min_position=[0.0, 2.0], max_position=1.0, names=NAMES)
    with pytest.raises(LimitsError, match="'shoulder': max_velocity must be > 0, got 0"):
        CommandLimits.build(2, max_velocity=0.0, names=NAMES)
    with pytest.raises(LimitsError, match="max_acceleration must be > 0"):
        CommandLimits.build(2, max_acceleration=[-1.0, 1.0])
    with pytest.raises(LimitsError, match="needs 1 or 2 values, got 3"):
        CommandLimits.build(2, max_velocity=[1.0, 1.0, 1.0])


def test_position_clamp_and_violation() -> None:
    limits = CommandLimits.build(2, min_position=-1.0, max_position=1.0)
    command = np.array([2.0, -0.5])
    assert limits.violations(command, None, None, None, DT) == ["position"]
    assert limits.clamp(command, None, None, None, DT).tolist() == [1.0, -0.5]


def test_velocity_clamp_moves_at_most_max_velocity_per_tick() -> None:
    limits = CommandLimits.build(2, max_velocity=1.0)
    prev = np.zeros(2)
    command = np.array([1.0, 0.01])
    assert limits.violations(command, prev, None, None, DT) == ["velocity"]
    out = limits.clamp(command, prev, None, None, DT)
    assert out == pytest.approx([DT * 1.0, 0.01])


def test_acceleration_and_jerk_clamps() -> None:
    limits = CommandLimits.build(1, max_acceleration=10.0, max_jerk=100.0)
    prev, velocity, acceleration = np.zeros(1), np.zeros(1), np.zeros(1)
    command = np.array([1.0])
    assert limits.violations(command, prev, velocity, acceleration, DT) == [
        "acceleration", "jerk"]
    out = limits.clamp(command, prev, velocity, acceleration, DT)
    # The jerk bound allows an acceleration of 100 * DT = 3 this tick (< 10).
    assert out == pytest.approx([100.0 * DT * DT * DT])
    assert limits.violations(out, prev, velocity, acceleration, DT) == []


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(-50.0, 50.0), min_size=1, max_size=60),
       st.floats(0.1, 5.0), st.floats(0.5, 50.0))
def test_clamped_commands_never_leave_bounds_or_speed(wanted: list[float], vmax: float,
                                                      amax: float) -> None:
    limits = CommandLimits.build(1, min_position=-1.0, max_position=2.0, max_velocity=vmax,
                                 max_acceleration=amax)
    prev, velocity = np.zeros(1), None
    for value in wanted:
        out = limits.clamp(np.array([value]), prev, velocity, None, DT)
        assert -1.0 <= out[0] <= 2.0
        assert abs(out[0] - prev[0]) <= vmax * DT * (1 + 1e-9)
        new_velocity = (out - prev) / DT
        velocity, prev = new_velocity, out


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "joint_limits.yaml"
    path.write_text(text)
    return path


def test_ros2_control_joint_limits_yaml(tmp_path: Path) -> None:
    path = _write(tmp_path, """
joint_limits:
  shoulder:
    has_position_limits: true
    min_position: -1.5
    max_position: 1.5
    has_velocity_limits: true
    max_velocity: 2.0
    has_acceleration_limits: false
    max_acceleration: 0
    has_effort_limits: true
    max_effort: 5.0
  elbow:
    has_velocity_limits: true
    max_velocity: 1
    has_jerk_limits: true
    max_jerk: 300.0
""")
    limits = limits_from_yaml(path, NAMES)
    assert limits.min_position.tolist() == [-1.5, -math.inf]
    assert limits.max_velocity.tolist() == [2.0, 1.0]
    # Disabled limits do not apply, even with a value of 0.
    assert limits.max_acceleration.tolist() == [math.inf, math.inf]
    assert limits.max_jerk.tolist() == [math.inf, 300.0]
    nested = _write(tmp_path, "arm_controller:\n  ros__parameters:\n    joint_limits:\n"
                              "      elbow: {has_velocity_limits: true, max_velocity: 0.5}\n")
    assert limits_from_yaml(nested, NAMES).max_velocity.tolist() == [math.inf, 0.5]


@pytest.mark.parametrize(("text", "match"), [
    ("joint_limits:\n  wrist: {has_velocity_limits: true, max_velocity: 1.0}\n",
     "robot does not have: wrist"),
    ("joint_limits:\n  elbow: {has_position_limits: true, min_position: 1, "
     "max_position: 0}\n", "'elbow': min_position 1 exceeds max_position 0"),
    ("joint_limits:\n  elbow: {has_velocity_limits: true, max_velocity: -1}\n",
     "max_velocity must be > 0"),
    ("joint_limits:\n  elbow: {has_velocity_limits: true}\n",
     r"joint_limits.elbow.max_velocity must be a number"),
    ("limits: {}\n", "no joint_limits mapping"),
])
def test_bad_joint_limits_files_name_file_and_field(tmp_path: Path, text: str,
                                                    match: str) -> None:
    path = _write(tmp_path, text)
    with pytest.raises(LimitsError, match=match) as info:
        limits_from_yaml(path, NAMES)
    assert str(path) in str(info.value) and "\n" not in str(info.value)
