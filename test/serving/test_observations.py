"""Which buffered frame a request picks, checked without ROS."""

from __future__ import annotations

import pytest

from xinfer_ros.errors import ObservationError
from xinfer_ros.serving.observations import (
    NotObservedYetError,
    RobotObservations,
    joint_positions,
)

from .test_frame_budget import state


def stalled(late_frames: list[float]) -> RobotObservations:
    """One camera: frames until t = 10.0, a 3 s gap, then ``late_frames``."""
    obs = RobotObservations(cameras=1)
    for t in (9.8, 9.9, 10.0, *late_frames):
        obs.add_image(0, f"f@{t:g}", now=t, stamp_s=t)
        obs.add_state(state(t), now=t)
    return obs


def test_a_frame_just_after_the_stamp_stands_in_for_a_stale_one() -> None:
    # The request (13.0) left before the frame taken just after it reached the
    # server; the newest one at or before it is 3 s old.
    images, _ = stalled([13.05]).assemble(13.0, max_age=0.5)
    assert images == ["f@13.05"]


def test_the_newest_young_frame_at_or_before_the_stamp_wins() -> None:
    images, _ = stalled([12.9, 13.05]).assemble(13.0, max_age=0.5)
    assert images == ["f@12.9"]


def test_without_a_young_frame_either_side_the_reason_names_the_stale_one() -> None:
    with pytest.raises(ObservationError, match=r"camera_0/image_raw at or before the request "
                                               r"is 3\.000 s old"):
        stalled([13.9]).assemble(13.0, max_age=0.5)
    with pytest.raises(ObservationError, match="no camera_0/image_raw received yet"):
        RobotObservations(cameras=1).assemble(13.0, max_age=0.5)


def test_only_what_a_next_message_may_bring_is_not_observed_yet() -> None:
    """A server waits on NotObservedYetError only; a joint the robot lacks will not come."""
    with pytest.raises(NotObservedYetError):
        RobotObservations(cameras=1).assemble(13.0, max_age=0.5)
    with pytest.raises(ObservationError) as info:
        joint_positions(["a"], [0.0], ["a", "b"])
    assert not isinstance(info.value, NotObservedYetError)
