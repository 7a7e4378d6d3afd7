#!/usr/bin/env python3
"""Generate test/data/old_schema_fleet: a fleet bag in the PREVIOUS message definitions.

``PolicyRequest`` and ``ActionChunk`` gained a ``server`` field (commit fd8c918); a bag
recorded before that stores the old definitions. This script makes such a bag, small
enough to keep in the repository, whose recorded answers a replay with the emulated
backend reproduces exactly:

1. write one robot's cameras (tiny 16x20 frames), joint states, budget and requests
   with this build's definitions (rosbags' writer, no ROS);
2. replay it (``xinfer-replay --backend emulated --save-golden``) to get the server's
   answers;
3. write the sensors, requests and answers again, the requests and answers rebuilt as
   the OLD ``PolicyRequest`` / ``ActionChunk`` (texts below, from ``git show
   fd8c918^:msg/PolicyRequest.msg`` and ``...:msg/ActionChunk.msg``), so the bag
   stores the old definitions, as a bag recorded then would.

    ./env.sh python scripts/make_old_schema_bag.py test/data/old_schema_fleet
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

__all__ = ["OLD_DEFINITIONS", "main", "make_old_schema_bag"]

ROBOT = "robot_1"
CAMERAS = 3
JOINTS = 14
T0 = 1_700_000_000 * 10**9

#: The definitions before ``server`` was added (fd8c918^), comments left out.
OLD_DEFINITIONS = {
    "PolicyRequest": """std_msgs/Header header
string robot_id
uint64 seq
float64 budget_ms
uint32 commit_steps
float64 keyframe_spacing_s
float32[] prev_chunk
uint32 prev_horizon
uint32 prev_action_dim
string instruction
""",
    "ActionChunk": """uint8 STATUS_OK=0
uint8 STATUS_REJECTED=1
uint8 STATUS_SHED=2
uint8 STATUS_ERROR=3
std_msgs/Header header
string robot_id
uint64 seq
uint8 status
string reason
uint32 horizon
uint32 action_dim
float64 keyframe_spacing_s
uint32 commit_steps
float32[] actions
builtin_interfaces/Time[] image_stamps
builtin_interfaces/Time state_stamp
StageTiming timing
""",
}


def old_typestore() -> Any:
    """This build's typestore with the old PolicyRequest and ActionChunk."""
    from xinfer_ros.bags.types import make_typestore, msg_dir

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for path in msg_dir().glob("*.msg"):
            shutil.copy(path, folder / path.name)
        for name, text in OLD_DEFINITIONS.items():
            (folder / f"{name}.msg").write_text(text)
        return make_typestore(msgs=folder)


def _sensor_events(store: Any, seconds: float) -> list[tuple[int, str, Any]]:
    from xinfer_ros.bags.schema import rebuild

    t = store.types

    def stamp(ns: int) -> Any:
        return t["builtin_interfaces/msg/Time"](sec=ns // 10**9, nanosec=ns % 10**9)

    def header(ns: int, frame: str = "") -> Any:
        return t["std_msgs/msg/Header"](stamp=stamp(ns), frame_id=frame)

    events: list[tuple[int, str, Any]] = [(T0, f"/{ROBOT}/budget", t[
        "xinfer_ros/msg/ResponseBudget"](header=header(T0), budget_ms=400.0, phase="transport",
                                         source="make_old_schema_bag"))]
    for k in range(int(seconds * 20)):                         # 20 Hz joint states
        ns = T0 + k * 50_000_000
        events.append((ns + 1_000, f"/{ROBOT}/joint_states", t["sensor_msgs/msg/JointState"](
            header=header(ns), name=[f"joint_{i}" for i in range(JOINTS)],
            position=np.sin(np.arange(JOINTS) + ns / 1e9), velocity=np.zeros(0),
            effort=np.zeros(0))))
        if k % 2 == 0:                                          # 10 Hz cameras
            for cam in range(CAMERAS):
                value = (k * 7 + cam * 40) % 256
                events.append((ns + 2_000 + cam, f"/{ROBOT}/camera_{cam}/image_raw",
                               t["sensor_msgs/msg/Image"](
                                   header=header(ns, f"camera_{cam}"), height=16, width=20,
                                   encoding="rgb8", is_bigendian=0, step=60,
                                   data=np.full(16 * 20 * 3, value, np.uint8))))
        if k % 4 == 3:                                          # 5 Hz requests
            # By field name: fields this script does not know take their defaults.
            events.append((ns + 3_000, f"/{ROBOT}/policy_request", rebuild(
                store, "xinfer_ros/msg/PolicyRequest", SimpleNamespace(
                    header=header(ns), robot_id=ROBOT, seq=k // 4 + 1, budget_ms=400.0,
                    commit_steps=0, keyframe_spacing_s=0.05,
                    prev_chunk=np.zeros(0, np.float32), prev_horizon=0, prev_action_dim=0,
                    instruction="pick up the parcel"))))
    return events


def _write(path: Path, store: Any, events: list[tuple[int, str, Any]]) -> None:
    from rosbags.rosbag2 import StoragePlugin, Writer

    from xinfer_ros.bags.types import fleet_topics

    topics = {t.name: t for t in fleet_topics([ROBOT], CAMERAS)}
    with Writer(path, version=8, storage_plugin=StoragePlugin.MCAP) as writer:
        conns = {name: writer.add_connection(name, topic.msgtype, typestore=store,
                                             offered_qos_profiles=[topic.qos])
                 for name, topic in topics.items()
                 if any(e[1] == name for e in events)}
        for ns, topic, msg in sorted(events, key=lambda e: (e[0], e[1])):
            writer.write(conns[topic], ns, store.serialize_cdr(msg, conns[topic].msgtype))


def make_old_schema_bag(output: Path, seconds: float = 2.5) -> None:
    """Write the bag to ``output`` (must not exist)."""
    from xinfer_ros.bags.reader import open_bag
    from xinfer_ros.bags.schema import rebuild
    from xinfer_ros.bags.types import make_typestore

    if output.exists():
        raise SystemExit(f"{output} exists; remove it first")
    build = make_typestore()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        sensors = _sensor_events(build, seconds)
        _write(work / "source", build, sensors)
        golden = work / "golden"
        proc = subprocess.run(
            [sys.executable, "-m", "xinfer_ros.cli.replay", str(work / "source"),
             "--backend", "emulated", "--save-golden", str(golden), "--out", str(work),
             "--json", str(work / "report.json")],
            check=False, capture_output=True, text=True, timeout=300)
        if proc.returncode != 0:
            raise SystemExit(f"replay failed ({proc.returncode}):\n{proc.stdout}{proc.stderr}")
        old = old_typestore()
        events = [e for e in sensors if not e[1].endswith("/policy_request")]
        for item in open_bag(golden).messages():
            msg = build.deserialize_cdr(item.data, item.msgtype)
            events.append((item.timestamp, item.topic, rebuild(old, item.msgtype, msg)))
        _write(output, old, events)
    print(f"{output}: {sum(f.stat().st_size for f in output.iterdir())} bytes")


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: ``make_old_schema_bag.py OUTPUT [--seconds S]``."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("output", type=Path)
    p.add_argument("--seconds", type=float, default=2.5)
    args = p.parse_args(argv)
    make_old_schema_bag(args.output, args.seconds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
