"""Bags recorded with earlier message definitions still replay (issue 29, item 6).

test/data/old_schema_fleet is a fleet bag written with the PolicyRequest and
ActionChunk of before the ``server`` field (scripts/make_old_schema_bag.py made it); its
recorded answers are those the emulated backend gives, so a replay must reproduce them
exactly.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("rclpy")
pytestmark = pytest.mark.ros

from rosbags.rosbag2 import StoragePlugin, Writer  # noqa: E402

from xinfer_ros.bags.scan import scan_bag  # noqa: E402
from xinfer_ros.bags.schema import SchemaError, rebuild  # noqa: E402
from xinfer_ros.bags.types import make_typestore, msg_dir  # noqa: E402
from xinfer_ros.cli.replay import EXIT_BAD_INPUT, main  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
OLD_BAG = ROOT / "test" / "data" / "old_schema_fleet"
REQUEST = "xinfer_ros/msg/PolicyRequest"
CHUNK = "xinfer_ros/msg/ActionChunk"
T0 = 1_700_000_000 * 10**9


def test_the_old_schema_bag_is_small_and_stores_the_old_definitions() -> None:
    size = sum(f.stat().st_size for f in OLD_BAG.iterdir())
    assert size < 200 * 1024
    mcap = next(OLD_BAG.glob("*.mcap")).read_bytes()
    assert b"string instruction" in mcap and b"string server" not in mcap


@pytest.mark.timeout(60)
def test_an_old_bag_is_decoded_with_its_own_definitions_and_mapped_by_name() -> None:
    run = scan_bag(OLD_BAG)
    track = run.robots["robot_1"]
    assert len(track.requests) == 12 and len(track.chunks) == 12
    assert run.skipped == {}
    changes = {c.msgtype: c for c in run.schema_changes}
    assert set(changes) == {REQUEST, CHUNK}
    for change in changes.values():
        assert "server" in change.added and change.removed == ()
    assert any(w.startswith(f"{REQUEST}: the bag's definition differs") for w in run.warnings)
    # What the player sends is this build's PolicyRequest, the new field at its default.
    store = make_typestore()
    sent = store.deserialize_cdr(track.requests[0].data, REQUEST)
    assert sent.server == "" and sent.seq == track.requests[0].seq
    assert sent.instruction == "pick up the parcel"
    chunk = next(iter(track.chunks.values()))
    assert chunk.status == 0 and chunk.actions.shape == (chunk.actions.shape[0], 14)


def _store_with(tmp_path: Path, name: str, text: str):
    """This build's typestore with ``name``.msg replaced by ``text``."""
    folder = tmp_path / f"msgs_{name}"
    folder.mkdir()
    for path in msg_dir().glob("*.msg"):
        shutil.copy(path, folder / path.name)
    (folder / f"{name}.msg").write_text(text)
    return make_typestore(msgs=folder)


def _request_bag(tmp_path: Path, store, bag_name: str) -> Path:
    """A bag of one robot's policy requests in ``store``'s PolicyRequest."""
    bag = tmp_path / bag_name
    t = store.types
    with Writer(bag, version=8, storage_plugin=StoragePlugin.MCAP) as writer:
        conn = writer.add_connection("/robot_1/policy_request", REQUEST, typestore=store)
        for k in range(4):
            ns = T0 + k * 10**8
            header = t["std_msgs/msg/Header"](
                stamp=t["builtin_interfaces/msg/Time"](sec=ns // 10**9, nanosec=ns % 10**9),
                frame_id="")
            fields = {"header": header, "robot_id": "robot_1", "seq": k + 1,
                      "budget_ms": 150.0, "prev_chunk": np.zeros(0, np.float32),
                      "instruction": "x", "legacy_gain": 2.5}
            msg = rebuild(store, REQUEST, type("Fields", (), fields)())
            writer.write(conn, ns, store.serialize_cdr(msg, REQUEST))
    return bag


def _current_request_text() -> str:
    return (msg_dir() / "PolicyRequest.msg").read_text()


@pytest.mark.timeout(60)
def test_removed_fields_are_dropped_and_listed(tmp_path) -> None:
    text = _current_request_text() + "\nfloat64 legacy_gain\n"
    bag = _request_bag(tmp_path, _store_with(tmp_path, "PolicyRequest", text), "extra")
    run = scan_bag(bag)
    [change] = run.schema_changes
    assert change.msgtype == REQUEST and change.removed == ("legacy_gain",)
    assert change.added == ()
    assert [q.seq for q in run.robots["robot_1"].requests] == [1, 2, 3, 4]
    assert "no longer in this build (dropped): legacy_gain" in change.describe()


@pytest.mark.timeout(60)
def test_a_field_that_changed_type_exits_2_naming_it(tmp_path, capsys) -> None:
    text = _current_request_text()
    assert "uint64 seq" in text
    changed = _store_with(tmp_path, "PolicyRequest", text.replace("uint64 seq", "float64 seq"))
    bag = _request_bag(tmp_path, changed, "retyped")
    with pytest.raises(SchemaError) as info:
        scan_bag(bag)
    assert info.value.field == f"{REQUEST}.seq"
    assert main([str(bag), "--backend", "emulated", "--out", str(tmp_path / "out")]) \
        == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert "'seq'" in err and "float64 in the bag but uint64 in this build" in err


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_old_schema_fleet_bag_replays_passed_with_the_golden_check(tmp_path) -> None:
    report_path = tmp_path / "report.json"
    proc = subprocess.run(
        [sys.executable, "-m", "xinfer_ros.cli.replay", str(OLD_BAG), "--backend", "emulated",
         "--golden", str(OLD_BAG), "--require-identical", "--max-action-rms", "0",
         "--max-attainment-drop", "none", "--json", str(report_path), "--out", str(tmp_path)],
        check=False, capture_output=True, text=True, timeout=240, cwd=ROOT,
        env=dict(os.environ))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "PASSED" in proc.stdout and "actions match exactly" in proc.stdout
    report = json.loads(report_path.read_text())
    assert report["passed"] and report["skipped_messages"] == {}
    assert {c["type"] for c in report["schema_changes"]} == {REQUEST, CHUNK}
    actions = report["total"]["actions"]
    assert actions["comparable"] >= 5 and actions["all_identical"], actions
