"""A Fast DDS shared-memory segment large enough for camera frames, for their publishers.

Fast DDS (``rmw_fastrtps_cpp``, ROS 2's default) sends between processes of one host
through a shared-memory segment of the *writer's* process, 512 KiB by default. A
640x480 rgb8 frame (900 KiB) does not fit in it whole; best-effort samples whose
buffers are recycled before the reader has taken them are lost. A player publishing
three such cameras at 10 Hz on a loaded two-core machine lost 84 of 240 frames this way
(the server, behind on nothing, then found its newest frame over
``max_observation_age_s`` old). With a 64 MiB segment it lost none.

A reader killed while it holds frames (a server killed by SIGKILL or a crash, then
restarted by ``respawn:=true``) can stop that writer's frames for every reader, the
restarted server included, while its small messages (joint states) still arrive: the
simulated robot's cameras did so after 2 of 29 server kills with the default segment,
and after none of 70 with 16 MiB (docs/BENCHMARKS.md section 6.3). Our reading, not
traced in Fast DDS's code: the killed reader's buffers stay referenced in the writer's
segment (the symptom of eProsima/Fast-DDS#5469), and in 512 KiB one or two pinned
frames leave no room for another; a segment of many frames outlives a few.

The writer's own process's segment is what counts: :func:`use_large_segment` writes a
participant profile and points this process's Fast DDS at it (before ``rclpy.init``).
The bag player and the simulated robot call it. A profile the user chose, another RMW,
or ``FASTDDS_BUILTIN_TRANSPORTS`` is left alone.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["PLAYER_SEGMENT_BYTES", "SIM_SEGMENT_BYTES", "use_large_segment"]

#: The player's segment: 2.4 s of three 640x480 rgb8 cameras, or 2 s of two 1080p ones.
PLAYER_SEGMENT_BYTES = 64 * 2**20

#: The simulated robot's segment: 2.5 s of its default three cameras (352/320/320 x 224
#: rgb8 at 10 Hz), 18 frames of 640x480; one per robot, so smaller than the player's.
SIM_SEGMENT_BYTES = 16 * 2**20

#: Environment variables naming a Fast DDS profile file (current and legacy name).
_PROFILE_VARS = ("FASTDDS_DEFAULT_PROFILES_FILE", "FASTRTPS_DEFAULT_PROFILES_FILE")

_PROFILE = """<?xml version="1.0" encoding="UTF-8" ?>
<!-- Written by xinfer_ros: this process's camera frames must fit its shared-memory segment. -->
<dds xmlns="http://www.eprosima.com">
  <profiles>
    <transport_descriptors>
      <transport_descriptor>
        <transport_id>xinfer_frame_writer_shm</transport_id>
        <type>SHM</type>
        <segment_size>{segment}</segment_size>
      </transport_descriptor>
    </transport_descriptors>
    <participant profile_name="xinfer_frame_writer" is_default_profile="true">
      <rtps>
        <userTransports><transport_id>xinfer_frame_writer_shm</transport_id></userTransports>
        <useBuiltinTransports>true</useBuiltinTransports>
      </rtps>
    </participant>
  </profiles>
</dds>
"""


def use_large_segment(directory: Path, segment_bytes: int = PLAYER_SEGMENT_BYTES) -> str:
    """Give this process's Fast DDS a ``segment_bytes`` shared-memory segment.

    Call before ``rclpy.init``; child processes started with ``os.environ`` inherit it.

    Args:
        directory: Where the profile file is written.
        segment_bytes: Segment size.

    Returns:
        What was done, one line for the replay's output.
    """
    rmw = os.environ.get("RMW_IMPLEMENTATION", "") or "rmw_fastrtps_cpp"
    if not rmw.startswith("rmw_fastrtps"):
        return f"transport: {rmw}'s own configuration"
    if chosen := [v for v in (*_PROFILE_VARS, "FASTDDS_BUILTIN_TRANSPORTS") if os.environ.get(v)]:
        return (f"transport: Fast DDS as {chosen[0]} says (this process's frames need a "
                f"shared-memory segment of {segment_bytes / 2**20:.0f} MiB or so)")
    path = directory / "frame_writer_fastdds.xml"
    path.write_text(_PROFILE.format(segment=int(segment_bytes)), encoding="utf-8")
    os.environ["FASTDDS_DEFAULT_PROFILES_FILE"] = str(path)
    return (f"transport: Fast DDS shared memory, this process's segment "
            f"{segment_bytes / 2**20:.0f} MiB (the default 512 KiB loses large frames)")
