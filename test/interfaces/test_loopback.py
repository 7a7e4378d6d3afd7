"""The test environment keeps DDS discovery on loopback."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

rclpy = pytest.importorskip("rclpy", reason="rclpy is not installed (run make build)")
pytestmark = pytest.mark.ros

# RTPS well-known ports (DDS-RTPS 9.6.1.1): PB + DG * domain + d0, the multicast
# discovery port that a participant binds only when it discovers beyond loopback.
_PB, _DG, _D0 = 7400, 250, 0


def test_session_environment_is_loopback_only(ros_loopback_env: dict[str, str]) -> None:
    assert os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] == "LOCALHOST"
    assert 1 <= int(os.environ["ROS_DOMAIN_ID"]) <= 100
    assert ros_loopback_env["ROS_DOMAIN_ID"] == os.environ["ROS_DOMAIN_ID"]


def test_child_processes_inherit_loopback_setting() -> None:
    out = subprocess.run(
        [sys.executable, "-c",
         "import os; print(os.environ['ROS_AUTOMATIC_DISCOVERY_RANGE'], "
         "os.environ['ROS_DOMAIN_ID'])"],
        check=True, capture_output=True, text=True, env=dict(os.environ),
    ).stdout.split()
    assert out == ["LOCALHOST", os.environ["ROS_DOMAIN_ID"]]


def _own_udp_ports() -> set[int]:
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    ports = set()
    for table in ("/proc/self/net/udp", "/proc/self/net/udp6"):
        with open(table) as fh:
            for line in fh.readlines()[1:]:
                fields = line.split()
                if fields[9] in inodes:
                    ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


@pytest.mark.skipif(not os.path.exists("/proc/self/net/udp"), reason="needs Linux /proc")
def test_participant_does_not_join_multicast_discovery() -> None:
    rclpy.init()
    try:
        node = rclpy.create_node("loopback_probe")
        time.sleep(0.5)
        ports = _own_udp_ports()
        node.destroy_node()
    finally:
        rclpy.shutdown()
    assert ports, "the participant opened no UDP socket at all"
    multicast_port = _PB + _DG * int(os.environ["ROS_DOMAIN_ID"]) + _D0
    assert multicast_port not in ports
