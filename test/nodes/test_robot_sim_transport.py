"""The simulated robot publishes its frames through a segment a killed server cannot block."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pytest.importorskip("rclpy")


def test_robot_sim_starts_with_a_large_shared_memory_segment(monkeypatch) -> None:
    """The profile is in place before rclpy starts, and gone with the node."""
    from xinfer_ros.nodes import robot_sim, runtime
    from xinfer_ros.nodes.shm_transport import SIM_SEGMENT_BYTES

    for var in ("RMW_IMPLEMENTATION", "FASTDDS_DEFAULT_PROFILES_FILE",
                "FASTRTPS_DEFAULT_PROFILES_FILE", "FASTDDS_BUILTIN_TRANSPORTS"):
        monkeypatch.delenv(var, raising=False)
    seen: dict[str, str] = {}

    def spin(factory, argv=None, threads=1) -> int:
        path = Path(os.environ["FASTDDS_DEFAULT_PROFILES_FILE"])
        seen["factory"], seen["profile"] = factory.__name__, path.read_text()
        seen["path"] = str(path)
        return 0

    monkeypatch.setattr(runtime, "spin_node", spin)
    assert robot_sim.main([]) == 0
    assert seen["factory"] == "RobotSim"
    assert f"<segment_size>{SIM_SEGMENT_BYTES}<" in seen["profile"]
    assert SIM_SEGMENT_BYTES >= 16 * 2**20  # 2 s of the default cameras, with room
    assert not Path(seen["path"]).exists()


def test_robot_sim_leaves_a_users_dds_profile_alone(monkeypatch) -> None:
    from xinfer_ros.nodes import robot_sim, runtime

    monkeypatch.setenv("FASTDDS_DEFAULT_PROFILES_FILE", "/etc/site.xml")
    monkeypatch.setattr(runtime, "spin_node",
                        lambda *a, **k: 0 if os.environ["FASTDDS_DEFAULT_PROFILES_FILE"]
                        == "/etc/site.xml" else 1)
    assert robot_sim.main([]) == 0
