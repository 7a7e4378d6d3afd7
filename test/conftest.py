"""Session-wide test environment: DDS discovery on loopback, a private domain id."""

from __future__ import annotations

import gc
import os
import random
import signal
import sys
from collections.abc import Iterator

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


@pytest.fixture(autouse=True)
def no_node_left_to_the_collector(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fail a ROS test that leaves an rcl node alive after its context has shut down.

    Such a node is finalised by the garbage collector at some later allocation, in
    whatever test runs then; that once hung ``make test`` inside Fast DDS
    (``xinfer_ros.nodes.lifetime``). The node is destroyed here, so the next test runs
    clean.
    """
    yield
    ros = request.node.get_closest_marker("ros") is not None or "nodes" in request.path.parts
    if not ros or "rclpy.node" not in sys.modules:
        return
    from rclpy.lifecycle import LifecycleNode
    from rclpy.node import Node

    from xinfer_ros.nodes.lifetime import end_state_machine

    left = []
    for obj in gc.get_objects():
        # type(), not isinstance: that reads __class__, which weak proxies and some
        # lazy torch modules answer with an error or a warning.
        if issubclass(type(obj), Node) and not obj.context.ok() and _live(obj):
            left.append(obj)
    for node in left:
        if _live_handle(node):
            node.destroy_node()
        if isinstance(node, LifecycleNode):  # rclpy's own destroy_node leaves it
            end_state_machine(node)
    if left:
        pytest.fail(f"left alive after rclpy shut down: {[n.get_name() for n in left]}; "
                    "destroy nodes before the context (xinfer_ros.nodes.lifetime)")


def _live(node: object) -> bool:
    """Whether ``node`` still holds its rcl node: its handle or a lifecycle state machine."""
    return _live_handle(node) or getattr(node, "_state_machine", None) is not None


def _live_handle(node: object) -> bool:
    """Whether ``node``'s rcl handle has not been destroyed."""
    try:
        with node.handle:  # type: ignore[attr-defined]
            return True
    except Exception:  # InvalidHandle once destroyed; AttributeError if never made
        return False
