"""An operator arms and disarms an executor with ``ros2 lifecycle set``."""

import shutil
import signal
import subprocess
import time

import pytest

rclpy = pytest.importorskip("rclpy")
pytestmark = [pytest.mark.ros, pytest.mark.slow]

from rclpy.executors import SingleThreadedExecutor  # noqa: E402
from xinfer_ros.msg import ExecutorStats  # noqa: E402

from .test_processes import start  # noqa: E402


def _ros2(*args: str) -> str:
    proc = subprocess.run(["ros2", *args], capture_output=True, text=True, timeout=60,
                          check=False)
    return proc.stdout + proc.stderr


@pytest.mark.timeout(180)
@pytest.mark.skipif(shutil.which("ros2") is None, reason="the ros2 command is not installed")
def test_ros2_lifecycle_set_configures_activates_and_deactivates(tmp_path) -> None:
    proc = start("xinfer_ros.nodes.rtc_executor", "/lc", {"autostart": False,
                                                          "stats_period_s": 0.2}, tmp_path)
    rclpy.init()
    node = rclpy.create_node("watcher")
    stats: list[ExecutorStats] = []
    node.create_subscription(ExecutorStats, "/lc/executor_stats", stats.append, 10)
    spinner = SingleThreadedExecutor()
    spinner.add_node(node)

    def spin(seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            spinner.spin_once(timeout_sec=0.05)

    try:
        end = time.monotonic() + 30
        while "unconfigured" not in _ros2("lifecycle", "get", "/lc/rtc_executor"):
            assert time.monotonic() < end, "the executor never showed up"
        spin(0.5)
        assert stats == []  # unconfigured: nothing published
        for transition, state in (("configure", "inactive"), ("activate", "active"),
                                  ("deactivate", "inactive")):
            assert "Transitioning successful" in _ros2("lifecycle", "set", "/lc/rtc_executor",
                                                       transition)
            assert state in _ros2("lifecycle", "get", "/lc/rtc_executor")
            stats.clear()
            spin(0.6)
            assert stats and stats[-1].lifecycle == state
            assert stats[-1].requests_sent > 0 or state != "active"
    finally:
        spinner.shutdown()
        node.destroy_node()
        rclpy.shutdown()
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=15) == 0
