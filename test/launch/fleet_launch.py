"""launch_testing: fleet.launch.py serves OK chunks to every robot, then exits cleanly.

Run by ``launch_test`` (test/nodes/test_launch.py does), with launch arguments after the
file, e.g. ``launch_test test/launch/fleet_launch.py sim:=false`` or ``servers:=2`` (two
servers and the fleet manager) or ``backend:=emulated``. Without ``backend`` the fleet
runs as shipped: config/fleet.yaml's torch backend, pi0-tiny, two Action worker
processes and the CPU rate table. With ``sim:=false``
no simulated robot runs: this test publishes the robots' cameras and joint states, as
their drivers would, and activates the executors (they wait for it with real robots).
Shutdown sends SIGINT to every process; each must exit with 0.
"""

import sys
import time
import unittest
from pathlib import Path

import launch_testing
import launch_testing.actions
import launch_testing.asserts
import numpy as np
import rclpy
from launch.actions import DeclareLaunchArgument, IncludeLaunchDescription
from launch.launch_description_sources import PythonLaunchDescriptionSource
from launch.substitutions import LaunchConfiguration
from rclpy.qos import qos_profile_sensor_data
from sensor_msgs.msg import Image, JointState
from xinfer_ros.msg import ActionChunk

from launch import LaunchDescription
from xinfer_ros.serving.image_conversion import rgb_to_image_fields

# launch_test loads this file by path, outside the test package.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from service_calls import configure_and_activate

LAUNCH = Path(__file__).resolve().parents[2] / "launch" / "fleet.launch.py"
ROBOTS = ("robot_1", "robot_2")
#: OK chunks each robot must receive.
WANTED = 5


def generate_test_description() -> LaunchDescription:
    """The fleet of fleet.launch.py with two robots (backend: the configuration's)."""
    fleet = IncludeLaunchDescription(
        PythonLaunchDescriptionSource(str(LAUNCH)),
        launch_arguments={"robots": ",".join(ROBOTS), "backend": LaunchConfiguration("backend"),
                          "sim": LaunchConfiguration("sim"),
                          "servers": LaunchConfiguration("servers")}.items())
    return LaunchDescription([
        DeclareLaunchArgument("sim", default_value="true"),
        DeclareLaunchArgument("servers", default_value="1"),
        DeclareLaunchArgument("backend", default_value=""),
        fleet,
        launch_testing.actions.ReadyToTest(),
    ])


def _activate(node, name: str) -> None:
    """``ros2 lifecycle set NAME configure`` then ``activate``, as an operator would."""
    configure_and_activate(node, name, lambda future, seconds: rclpy.spin_until_future_complete(
        node, future, timeout_sec=seconds))


class TestFleetServes(unittest.TestCase):
    """While the fleet runs."""

    def test_every_robot_gets_ok_chunks(self, launch_service) -> None:
        sim = launch_service.context.launch_configurations.get("sim", "true") == "true"
        rclpy.init(args=[])  # launch_test's own arguments are no ROS arguments
        node = rclpy.create_node("fleet_launch_test")
        ok = dict.fromkeys(ROBOTS, 0)

        def on_chunk(robot: str, msg: ActionChunk) -> None:
            ok[robot] += msg.status == ActionChunk.STATUS_OK

        drivers = {}
        for robot in ROBOTS:
            node.create_subscription(ActionChunk, f"/{robot}/action_chunk",
                                     lambda m, r=robot: on_chunk(r, m), 10)
            if not sim:  # be the robots' drivers
                drivers[robot] = (
                    [node.create_publisher(Image, f"/{robot}/camera_{i}/image_raw",
                                           qos_profile_sensor_data) for i in range(3)],
                    node.create_publisher(JointState, f"/{robot}/joint_states",
                                          qos_profile_sensor_data))
        if not sim:  # real arms: servers and executors wait for configure, activate
            servers = int(launch_service.context.launch_configurations.get("servers", "1"))
            for server in (["/inference_server"] if servers == 1
                           else [f"/server_{i}" for i in range(servers)]):
                _activate(node, server)
            for robot in ROBOTS:
                _activate(node, f"/{robot}/rtc_executor")
        frame = rgb_to_image_fields(np.full((240, 320, 3), 80, np.uint8))
        try:
            # The shipped torch configuration loads π0 and starts two Action worker
            # processes first: tens of seconds on a busy two-core machine.
            end = time.monotonic() + 180.0
            while time.monotonic() < end and min(ok.values()) < WANTED:
                stamp = node.get_clock().now().to_msg()
                for cameras, joints in drivers.values():
                    for pub in cameras:
                        msg = Image(**frame)
                        msg.header.stamp = stamp
                        pub.publish(msg)
                    state = JointState(position=[0.0] * 14)
                    state.header.stamp = stamp
                    joints.publish(state)
                rclpy.spin_once(node, timeout_sec=0.1)
        finally:
            node.destroy_node()
            rclpy.shutdown()
        self.assertGreaterEqual(min(ok.values()), WANTED, ok)


@launch_testing.post_shutdown_test()
class TestFleetStops(unittest.TestCase):
    """After the launch shut down (SIGINT to every process)."""

    def test_every_process_exits_cleanly(self, proc_info) -> None:
        launch_testing.asserts.assertExitCodes(proc_info)
