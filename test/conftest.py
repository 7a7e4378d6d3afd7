"""Session-wide test environment: DDS discovery on loopback, a private domain id."""

from __future__ import annotations

import os
import random
import signal

import pytest

from .dds_shm import clean_zombie_shm

# Set at import time, before any test module can initialise rclpy, so that no
# participant of this session ever announces itself beyond loopback.
os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
if os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] != "LOCALHOST":
    raise RuntimeError("tests require ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST")
os.environ["ROS_DOMAIN_ID"] = str(random.SystemRandom().randint(1, 100))

# Tests press Ctrl-C on the commands they start, as a terminal would. A session started
# as a background job of a non-interactive shell inherits SIGINT ignored, and so would
# every command it starts (ros2 launch then never sees the Ctrl-C): start them as a
# terminal's foreground job would be, with SIGINT at its default.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(scope="session", autouse=True)
def no_zombie_dds_shm() -> None:
    """Start the session without shared memory left by killed ROS processes (dds_shm)."""
    clean_zombie_shm()


@pytest.fixture(scope="session", autouse=True)
def ros_loopback_env() -> dict[str, str]:
    """Give the session a random ROS_DOMAIN_ID and keep discovery on loopback."""
    return {
        "ROS_DOMAIN_ID": os.environ["ROS_DOMAIN_ID"],
        "ROS_AUTOMATIC_DISCOVERY_RANGE": os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"],
    }
