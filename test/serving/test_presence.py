"""The server's own pauses are not counted as its robots' silence."""

import pytest

from xinfer_ros.serving.presence import OwnPauses, silent_cameras


def test_checks_on_time_or_a_little_late_are_no_pause() -> None:
    pauses = OwnPauses(0.1, 0.3)
    assert pauses.tick(10.0) == 0.0
    assert pauses.tick(10.1) == 0.0
    assert pauses.tick(10.35) == 0.0  # 2.5 periods late: a busy executor, not a pause


def test_a_stall_is_measured_beyond_the_tolerated_lateness() -> None:
    pauses = OwnPauses(0.1, slack_s=0.3)
    pauses.tick(5.0)
    assert pauses.tick(8.1) == pytest.approx(2.8)  # a 3 s SIGSTOP between two checks
    assert pauses.tick(8.2) == 0.0  # measured once, from the latest check on


@pytest.mark.parametrize(("period", "slack"), [(0.0, 0.3), (-1.0, 0.3), (0.1, 0.05)])
def test_nonsense_settings_are_refused(period: float, slack: float) -> None:
    with pytest.raises(ValueError, match="period_s"):
        OwnPauses(period, slack)


def test_a_camera_is_silent_only_while_its_robot_is_heard() -> None:
    # camera 1 delivered nothing for 3 s while joint states and requests kept coming
    assert silent_cameras([9.9, 7.0, 9.5], robot_seen=9.95, now=10.0, after_s=2.0) == [1]
    # the whole robot is silent: the presence check drops it, no camera is singled out
    assert silent_cameras([7.0, 7.0, 7.0], robot_seen=7.0, now=10.0, after_s=2.0) == []
    assert silent_cameras([0.0], robot_seen=10.0, now=10.0, after_s=0.0) == []  # off
