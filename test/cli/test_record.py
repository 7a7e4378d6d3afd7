"""xinfer-record: the domain it records on, and a recording that hears nothing fails."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("rclpy")

from xinfer_ros.cli.record import record_env

ROOT = Path(__file__).resolve().parents[2]


def test_a_running_fleet_is_recorded_on_the_environments_domain() -> None:
    assert record_env(False, {})["ROS_DOMAIN_ID"] == "0"  # ROS' default, as the fleet's
    env = record_env(False, {"ROS_DOMAIN_ID": "42"})
    assert env["ROS_DOMAIN_ID"] == "42" and env["ROS_AUTOMATIC_DISCOVERY_RANGE"] == "LOCALHOST"
    assert record_env(False, {"ROS_AUTOMATIC_DISCOVERY_RANGE": "SUBNET"})[
        "ROS_AUTOMATIC_DISCOVERY_RANGE"] == "SUBNET"  # the caller's choice stands


def test_a_started_fleet_gets_a_private_domain_unless_one_is_set() -> None:
    domain = int(record_env(True, {})["ROS_DOMAIN_ID"])
    assert 1 <= domain <= 100
    assert record_env(True, {"ROS_DOMAIN_ID": "7"})["ROS_DOMAIN_ID"] == "7"


@pytest.mark.timeout(60)
def test_a_recording_that_hears_nothing_fails_with_the_reason(tmp_path) -> None:
    # A domain of its own (0-101 are safe on Linux): no publisher of this session is there.
    silent = str(random.SystemRandom().choice(
        [d for d in range(1, 101) if str(d) != os.environ.get("ROS_DOMAIN_ID")]))
    env = {**os.environ, "ROS_DOMAIN_ID": silent}
    bag = tmp_path / "bag"
    proc = subprocess.run([sys.executable, "-m", "xinfer_ros.cli.record", "-o", str(bag),
                           "--robots", "arm_1", "--topic-timeout", "1.5"],
                          capture_output=True, text=True, timeout=50, cwd=ROOT, env=env,
                          check=False)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "no message on any recorded topic of robots ['arm_1'] within 1.5 s" in proc.stderr
    assert f"ROS_DOMAIN_ID={silent}" in proc.stderr


def test_topic_timeout_is_validated(tmp_path) -> None:
    from xinfer_ros.cli.record import main

    assert main(["-o", str(tmp_path / "bag"), "--topic-timeout", "-1"]) == 2


@pytest.mark.timeout(60)
def test_a_recording_shorter_than_the_timeout_that_heard_nothing_fails(tmp_path) -> None:
    silent = str(random.SystemRandom().choice(
        [d for d in range(1, 101) if str(d) != os.environ.get("ROS_DOMAIN_ID")]))
    proc = subprocess.run([sys.executable, "-m", "xinfer_ros.cli.record", "-o",
                           str(tmp_path / "bag"), "--robots", "arm_1", "--duration", "1"],
                          capture_output=True, text=True, timeout=50, cwd=ROOT,
                          env={**os.environ, "ROS_DOMAIN_ID": silent}, check=False)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "before the recording ended" in proc.stderr
