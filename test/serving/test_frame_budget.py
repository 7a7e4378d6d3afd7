"""The byte budget of a robot's stored camera frames, checked without ROS."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from xinfer_ros.serving.observations import FrameBudgetError, RobotObservations

MIB = 2**20


def frame(name: str) -> str:
    return name  # any object: the store keeps what it is given


def state(stamp_s: float) -> SimpleNamespace:
    sec = int(stamp_s)
    return SimpleNamespace(header=SimpleNamespace(
        stamp=SimpleNamespace(sec=sec, nanosec=round((stamp_s - sec) * 1e9))))


def fill(obs: RobotObservations, frames: int, sizes: list[int], start: float = 100.0) -> None:
    """``frames`` rounds at 10 Hz: one frame of ``sizes[c]`` bytes per camera."""
    for k in range(frames):
        t = start + 0.1 * k
        for cam, size in enumerate(sizes):
            obs.add_image(cam, frame(f"c{cam}@{k}"), now=t, stamp_s=t, nbytes=size)
        obs.add_state(state(t), now=t)


def test_a_robot_within_its_budget_keeps_every_camera_at_full_depth() -> None:
    obs = RobotObservations(cameras=3, max_frame_bytes=64 * MIB)
    vga = 640 * 480 * 3
    fill(obs, 20, [vga] * 3)
    assert obs.frame_bytes == 3 * 8 * vga and obs.frames_refused == 0
    # The frame of 0.75 s ago is still there to pick.
    images, _ = obs.assemble(100.0 + 0.1 * 12, max_age=0.5)
    assert images == ["c0@12", "c1@12", "c2@12"]


def test_the_store_never_exceeds_its_budget_and_a_large_camera_gives_up_depth_first() -> None:
    budget = 10 * MIB
    obs = RobotObservations(cameras=3, max_frame_bytes=budget)
    sizes = [3 * MIB, MIB // 4, MIB // 4]  # one big camera, two small ones
    for k in range(30):
        t = 100.0 + 0.1 * k
        for cam, size in enumerate(sizes):
            obs.add_image(cam, frame(f"c{cam}@{k}"), now=t, stamp_s=t, nbytes=size)
            assert obs.frame_bytes <= budget
    assert obs.frames_refused == 0
    assert obs.frame_bytes == 2 * 3 * MIB + 2 * 8 * (MIB // 4)  # small cameras keep 8
    obs.add_state(state(102.9), now=102.9)
    images, _ = obs.assemble(102.9, max_age=0.5)
    assert images == ["c0@29", "c1@29", "c2@29"]


def test_a_frame_that_cannot_fit_is_refused_counted_and_named_by_the_request() -> None:
    obs = RobotObservations(cameras=3, max_frame_bytes=64 * MIB)
    uhd = 3840 * 2160 * 3  # a 4K rgb8 frame, 23.7 MiB
    fill(obs, 3, [uhd, uhd, 1000])
    with pytest.raises(FrameBudgetError, match=r"camera_2 frame of 23\.73 MiB refused.*"
                       r"max_frame_bytes_per_robot=67108864 \(64\.00 MiB\)"):
        obs.add_image(2, frame("big"), now=100.3, stamp_s=100.3, nbytes=uhd)
    assert obs.frames_refused == 1 and obs.frame_bytes <= 64 * MIB
    obs.add_state(state(100.3), now=100.3)
    # An older frame of camera 2, still young enough, serves the request ...
    images, _ = obs.assemble(100.3, max_age=0.5)
    assert images[2] == "c2@2"
    # ... and once it is too old, the request's reason names the budget.
    for cam in (0, 1):
        obs.add_image(cam, frame(f"c{cam}@late"), now=101.0, stamp_s=101.0, nbytes=uhd)
    obs.add_state(state(101.0), now=101.0)
    with pytest.raises(FrameBudgetError, match=r"camera_2/image_raw.*0\.800 s old.*"
                       "refused.*max_frame_bytes_per_robot"):
        obs.assemble(101.0, max_age=0.5)
    # A frame that fits again clears the refusal.
    obs.add_image(2, frame("small"), now=101.0, stamp_s=101.0, nbytes=1000)
    images, _ = obs.assemble(101.0, max_age=0.5)
    assert images[2] == "small" and obs.frames_refused == 1


def test_clear_frees_the_bytes_and_a_zero_budget_means_none() -> None:
    obs = RobotObservations(cameras=2, max_frame_bytes=MIB)
    fill(obs, 4, [MIB // 4, MIB // 4])
    assert obs.frame_bytes == MIB
    obs.clear()
    assert obs.frame_bytes == 0
    unlimited = RobotObservations(cameras=1)
    fill(unlimited, 12, [50 * MIB])
    assert unlimited.frame_bytes == 8 * 50 * MIB  # depth alone bounds it
