import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from xinfer_ros.rtc.command_gate import CommandGate, LimitAction
from xinfer_ros.rtc.limits import CommandLimits, LimitsError

DT = 0.03


def gate(action: LimitAction = LimitAction.CLAMP, ramp: float = 0.3,
         **limits: float) -> CommandGate:
    return CommandGate(CommandLimits.build(2, **limits), DT, ramp, action)


def test_engage_blends_from_the_measured_state_over_the_ramp() -> None:
    g = gate(ramp=0.3)  # 10 ticks
    g.engage(np.array([0.0, 1.0]))
    target = np.array([1.0, 0.0])
    sent = [g.step(target).command for _ in range(12)]
    assert sent[0] == pytest.approx([0.1, 0.9])
    assert sent[4] == pytest.approx([0.5, 0.5])
    assert sent[9] == pytest.approx(target) and not g.engaging
    steps = np.abs(np.diff(np.vstack([[0.0, 1.0], *sent]), axis=0))
    assert steps.max() == pytest.approx(0.1)


def test_engage_never_steps_more_than_the_velocity_limit_allows_even_with_stop() -> None:
    g = gate(LimitAction.STOP, ramp=0.06, max_velocity=1.0)
    g.engage(np.array([0.0, 0.0]))
    sent = [g.step(np.array([2.0, -2.0])).command for _ in range(100)]
    assert all(c is not None for c in sent)  # clamped while engaging, never refused
    steps = np.abs(np.diff(np.vstack([[0.0, 0.0], *sent]), axis=0))
    assert steps.max() <= 1.0 * DT + 1e-12
    # The ramp ends once the command follows the policy unclamped.
    assert sent[-1] == pytest.approx([2.0, -2.0]) and not g.engaging
    assert g.stops == 0 and g.clamps > 0


def test_stop_mode_refuses_a_command_that_breaks_a_limit_after_the_ramp() -> None:
    g = gate(LimitAction.STOP, ramp=0.03, max_position=1.0)
    g.engage(np.zeros(2))
    assert g.step(np.array([0.5, 0.5])).command is not None
    out = g.step(np.array([1.5, 0.5]))
    assert out.command is None and out.broken == ("position",) and g.stops == 1


def test_clamp_mode_clamps_and_counts() -> None:
    g = gate(LimitAction.CLAMP, ramp=0.03, min_position=-1.0, max_position=1.0)
    g.engage(None)  # nothing measured: no blend
    assert g.step(np.array([0.2, 0.2])).command == pytest.approx([0.2, 0.2])
    out = g.step(np.array([3.0, -3.0]))
    assert out.command == pytest.approx([1.0, -1.0]) and g.clamps == 1


def test_preview_matches_the_ticks_and_does_not_advance() -> None:
    g = gate(ramp=0.3, max_velocity=2.0)
    g.engage(np.zeros(2))
    rows = np.tile([1.0, -1.0], (20, 1))
    preview = g.preview(rows)
    assert preview is not None
    sent = np.vstack([g.step(r).command for r in rows])
    assert np.allclose(preview, sent)


def test_a_ramp_of_zero_is_refused() -> None:
    with pytest.raises(LimitsError, match="engage_ramp_s must be > 0"):
        gate(ramp=0.0)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.lists(st.floats(-1e6, 1e6), min_size=2, max_size=2), min_size=1,
                max_size=80),
       st.lists(st.floats(-3.0, 3.0), min_size=2, max_size=2),
       st.sampled_from(list(LimitAction)))
def test_no_command_ever_outside_limits(wanted: list[list[float]], measured: list[float],
                                        action: LimitAction) -> None:
    vmax = 1.5
    g = gate(action, ramp=0.2, min_position=-2.0, max_position=2.0, max_velocity=vmax,
             max_acceleration=20.0)
    start = np.clip(np.array(measured), -2.0, 2.0)
    g.engage(start)
    prev = start
    for row in wanted:
        out = g.step(np.array(row)).command
        if out is None:
            assert action == LimitAction.STOP
            break
        assert np.all(out >= -2.0) and np.all(out <= 2.0)
        assert np.all(np.abs(out - prev) <= vmax * DT * (1 + 1e-9))
        prev = out
