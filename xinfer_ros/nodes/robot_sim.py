"""Simulated robot: cameras, joint state and the controller's response budget.

Per robot namespace it publishes ``camera_{i}/image_raw`` (an opencv-rendered scene
whose gripper and parcel move with the commanded joints), ``joint_states`` (a
first-order tracking of ``commands``) and ``budget`` (ResponseBudget). Budgets follow
one of the simulator's workloads (:func:`xinfer_ros.sim.workloads.build_workload`),
indexed like the paper by this robot's completed responses.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import numpy.typing as npt
from rclpy.node import Node
from rclpy.qos import qos_profile_sensor_data
from sensor_msgs.msg import Image, JointState
from std_msgs.msg import Float64MultiArray

from xinfer_ros.core.constants import ACTION_DIM
from xinfer_ros.msg import ActionChunk, ResponseBudget
from xinfer_ros.nodes.lifetime import destroyed_on_failure
from xinfer_ros.nodes.params import ParamSpec, declare_params
from xinfer_ros.nodes.rtc_executor import BUDGET_QOS
from xinfer_ros.nodes.runtime import EXECUTOR_PARAM
from xinfer_ros.serving.image_conversion import rgb_to_image_fields
from xinfer_ros.sim.workloads import WORKLOADS, build_workload

__all__ = ["PARAMS", "RobotSim", "SceneRenderer", "main"]

#: Budgets at or below this are labelled as contact phases (ms).
CONTACT_BUDGET_MS = 120.0

PARAMS = [
    ParamSpec("robot_index", 0, "this robot's index in the fleet workload", 0, 10_000),
    ParamSpec("fleet_size", 1, "robots in the workload (sets phase staggering)", 1, 10_000),
    ParamSpec("workload", "phases", "budget pattern",
              choices=tuple(w for w in WORKLOADS if w != "custom")),
    ParamSpec("seed", 0, "workload seed", 0, 2**31 - 1),
    ParamSpec("budget_scale", 1.0, "multiplies every budget of the workload (fit the paper's "
              "GPU budgets to a slower machine)", 0.01, 100.0),
    ParamSpec("action_dim", ACTION_DIM, "joints D", 1, 256),
    ParamSpec("camera_widths", [352, 320, 320], "width of each camera (px)"),
    ParamSpec("camera_height", 224, "camera height (px)", 16, 4096),
    ParamSpec("camera_rate_hz", 10.0, "camera frame rate (Hz)", 0.1, 120.0),
    ParamSpec("state_rate_hz", 50.0, "joint_states rate (Hz)", 0.1, 1000.0),
    ParamSpec("tracking_time_constant_s", 0.05, "joint response to commands (s)", 0.0, 10.0),
    EXECUTOR_PARAM,
]


class SceneRenderer:
    """Draws a tabletop scene whose gripper and parcel follow the joints.

    The static background is drawn once per camera; each frame copies it and draws
    two shapes, which keeps a 3-camera robot cheap on a small CPU.
    """

    def __init__(self, widths: list[int], height: int, seed: int) -> None:
        rng = np.random.default_rng(seed)
        self._backgrounds = []
        for cam, width in enumerate(widths):
            bg = np.zeros((height, width, 3), np.uint8)
            bg[:] = rng.integers(60, 120, size=3, dtype=np.uint8)
            cv2.rectangle(bg, (0, height * 2 // 3), (width, height), (90, 70, 50), -1)
            for _ in range(6):
                center = (int(rng.integers(0, width)), int(rng.integers(0, height * 2 // 3)))
                cv2.circle(bg, center, int(rng.integers(3, 12)), (200, 200, 200), -1)
            cv2.putText(bg, f"cam{cam}", (4, 14), cv2.FONT_HERSHEY_SIMPLEX, 0.4,
                        (255, 255, 255), 1)
            self._backgrounds.append(bg)

    def render(self, camera: int, joints: npt.NDArray[np.float64]) -> npt.NDArray[np.uint8]:
        """One RGB frame of ``camera`` for joint positions ``joints``."""
        frame = self._backgrounds[camera].copy()
        h, w = frame.shape[:2]
        x = int(w * (0.5 + 0.35 * np.tanh(joints[0])))
        y = int(h * (0.45 + 0.25 * np.tanh(joints[1 % len(joints)])))
        opening = int(6 + 6 * (1 + np.tanh(joints[-1])))
        cv2.rectangle(frame, (x - 12, y + 30), (x + 12, y + 50), (30, 140, 220), -1)
        cv2.line(frame, (x, 0), (x, y), (220, 220, 220), 3)
        cv2.line(frame, (x - opening, y), (x - opening, y + 18), (240, 60, 60), 3)
        cv2.line(frame, (x + opening, y), (x + opening, y + 18), (240, 60, 60), 3)
        return frame


class RobotSim(Node):
    """A simulated robot; see the module docstring."""

    @destroyed_on_failure
    def __init__(self, **kwargs: Any) -> None:
        super().__init__("robot_sim", **kwargs)
        p = declare_params(self, PARAMS)
        if p["robot_index"] >= p["fleet_size"]:
            raise ValueError(
                f"robot_index {p['robot_index']} must be below fleet_size {p['fleet_size']}")
        widths = [int(w) for w in p["camera_widths"]]
        if not widths or any(w < 16 for w in widths):
            raise ValueError(f"parameter 'camera_widths' must list widths >= 16, got {widths}")
        workload = build_workload(p["workload"], p["fleet_size"], p["seed"],
                                  budget_scale=p["budget_scale"])
        self._schedule = workload.robots[p["robot_index"]].budgets
        self._workload = p["workload"]
        self._tau = p["tracking_time_constant_s"]
        self._joints = np.zeros(p["action_dim"])
        self._target = np.zeros(p["action_dim"])
        self._names = [f"joint_{i}" for i in range(p["action_dim"])]
        self._last_state = time.monotonic()
        self._responses = 0
        self._budget_ms = float("nan")
        self._renderer = SceneRenderer(widths, p["camera_height"], p["seed"] + p["robot_index"])

        self._cams = [self.create_publisher(Image, f"camera_{i}/image_raw",
                                            qos_profile_sensor_data)
                      for i in range(len(widths))]
        self._state_pub = self.create_publisher(JointState, "joint_states",
                                                qos_profile_sensor_data)
        self._budget_pub = self.create_publisher(ResponseBudget, "budget", BUDGET_QOS)
        self.create_subscription(Float64MultiArray, "commands", self._on_command, 10)
        self.create_subscription(ActionChunk, "action_chunk", self._on_chunk, 10)
        # Cameras publish round-robin, spread over the frame period: a burst of
        # several large frames overflows Fast DDS's shared-memory segment (512 KiB by
        # default) and best-effort frames are then lost.
        self._next_cam = 0
        self.create_timer(1.0 / (p["camera_rate_hz"] * len(widths)), self._publish_image)
        self.create_timer(1.0 / p["state_rate_hz"], self._publish_state)
        self._publish_budget()
        self.get_logger().info(
            f"simulated robot {p['robot_index'] + 1} of {p['fleet_size']}: {len(widths)} "
            f"cameras at {p['camera_rate_hz']:g} Hz, {p['action_dim']} joints, workload "
            f"{p['workload']}")

    def _on_command(self, msg: Float64MultiArray) -> None:
        if len(msg.data) == len(self._target):
            self._target = np.asarray(msg.data, dtype=np.float64)

    def _on_chunk(self, msg: ActionChunk) -> None:
        if msg.status == ActionChunk.STATUS_OK:
            self._responses += 1
            self._publish_budget()

    def _publish_budget(self) -> None:
        budget_ms = self._schedule(self._responses) * 1e3
        if budget_ms == self._budget_ms:
            return
        self._budget_ms = budget_ms
        msg = ResponseBudget(budget_ms=budget_ms, source=f"robot_sim/{self._workload}",
                             phase="contact" if budget_ms <= CONTACT_BUDGET_MS else "transport")
        msg.header.stamp = self.get_clock().now().to_msg()
        self._budget_pub.publish(msg)

    def _publish_state(self) -> None:
        now = time.monotonic()
        dt, self._last_state = now - self._last_state, now
        alpha = 1.0 if self._tau <= 0 else 1.0 - np.exp(-dt / self._tau)
        self._joints += alpha * (self._target - self._joints)
        msg = JointState(name=self._names, position=self._joints.tolist())
        msg.header.stamp = self.get_clock().now().to_msg()
        self._state_pub.publish(msg)

    def _publish_image(self) -> None:
        cam = self._next_cam
        self._next_cam = (cam + 1) % len(self._cams)
        msg = Image(**rgb_to_image_fields(self._renderer.render(cam, self._joints)))
        msg.header.stamp = self.get_clock().now().to_msg()
        msg.header.frame_id = f"camera_{cam}"
        self._cams[cam].publish(msg)


def main(argv: list[str] | None = None) -> int:
    """Run the simulated robot until SIGINT; return the exit status.

    Its frames go through a shared-memory segment that a killed server cannot block
    (:mod:`xinfer_ros.nodes.shm_transport`); the profile file lives as long as the node.
    """
    from xinfer_ros.nodes.runtime import spin_node
    from xinfer_ros.nodes.shm_transport import SIM_SEGMENT_BYTES, use_large_segment

    with tempfile.TemporaryDirectory(prefix="xinfer_robot_sim_") as profile_dir:
        transport = use_large_segment(Path(profile_dir), SIM_SEGMENT_BYTES)

        def build() -> RobotSim:
            node = RobotSim()
            # Says so when a user's own profile keeps its segment (perhaps the small default).
            node.get_logger().info(transport)
            return node

        return spin_node(build, argv)


if __name__ == "__main__":
    sys.exit(main())
