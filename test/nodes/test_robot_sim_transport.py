"""The simulated robot publishes its frames through a segment a killed server cannot block."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pytest.importorskip("rclpy")

#: What decides the transport of a Fast DDS process (see nodes/shm_transport).
_DDS_VARS = ("RMW_IMPLEMENTATION", "FASTDDS_DEFAULT_PROFILES_FILE",
             "FASTRTPS_DEFAULT_PROFILES_FILE", "FASTDDS_BUILTIN_TRANSPORTS")


def test_robot_sim_starts_with_a_large_shared_memory_segment(monkeypatch) -> None:
    """The profile is in place before rclpy starts, and gone with the node."""
    from xinfer_ros.nodes import robot_sim, runtime
    from xinfer_ros.nodes.shm_transport import SIM_SEGMENT_BYTES

    # Empty counts as unset, and monkeypatch restores what was there (main sets the
    # profile variable itself; a delenv of an absent variable would not undo that).
    for var in _DDS_VARS:
        monkeypatch.setenv(var, "")
    seen: dict[str, str] = {}

    def spin(factory, argv=None, threads=1) -> int:
        path = Path(os.environ["FASTDDS_DEFAULT_PROFILES_FILE"])
        seen["profile"], seen["path"] = path.read_text(), str(path)
        return 0

    monkeypatch.setattr(runtime, "spin_node", spin)
    assert robot_sim.main([]) == 0
    assert f"<segment_size>{SIM_SEGMENT_BYTES}<" in seen["profile"]
    assert not Path(seen["path"]).exists()
    # The segment holds 2 s of the default cameras' frames (rgb8).
    default = {spec.name: spec.default for spec in robot_sim.PARAMS}
    per_second = (sum(default["camera_widths"]) * default["camera_height"] * 3
                  * default["camera_rate_hz"])
    assert 2.0 * per_second <= SIM_SEGMENT_BYTES


def test_robot_sim_leaves_a_users_dds_profile_alone_and_says_so(monkeypatch, capfd) -> None:
    """A user's profile is kept, and the node's log names it and the segment it needs."""
    import rclpy

    from xinfer_ros.nodes import robot_sim, runtime

    for var in _DDS_VARS:
        monkeypatch.setenv(var, "")
    monkeypatch.setenv("FASTDDS_DEFAULT_PROFILES_FILE", "/etc/site.xml")

    def spin(factory, argv=None, threads=1) -> int:
        assert os.environ["FASTDDS_DEFAULT_PROFILES_FILE"] == "/etc/site.xml"
        os.environ["FASTDDS_DEFAULT_PROFILES_FILE"] = ""  # rclpy must not read the absent file
        rclpy.init(args=[])
        try:
            factory().destroy_node()
        finally:
            rclpy.shutdown()
        return 0

    monkeypatch.setattr(runtime, "spin_node", spin)
    assert robot_sim.main([]) == 0
    err = capfd.readouterr().err
    assert "FASTDDS_DEFAULT_PROFILES_FILE says" in err and "MiB or so" in err
