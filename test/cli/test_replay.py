"""xinfer-record and xinfer-replay end to end, and replay of bags from elsewhere.

The sample bag is generated here (a short fleet run with the deterministic pi0-tiny
torch model on CPU), never downloaded or shipped.
"""

import json
import os
import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("rclpy")
pytestmark = pytest.mark.ros

from rosbags.rosbag2 import StoragePlugin, Writer  # noqa: E402
from rosbags.typesys import get_types_from_msg  # noqa: E402

from xinfer_ros.bags.reader import BagError  # noqa: E402
from xinfer_ros.bags.report import Thresholds, build_report  # noqa: E402
from xinfer_ros.bags.scan import RecordedChunk, scan_bag  # noqa: E402
from xinfer_ros.bags.types import fleet_topics, make_typestore  # noqa: E402
from xinfer_ros.cli.replay import EXIT_BAD_INPUT, build_parser, main  # noqa: E402
from xinfer_ros.nodes.bag_player import PlayResult, SentRequest  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SHAPES = [(224, 352), (224, 320), (224, 320)]
H, D = 16, 14
T0 = 1_700_000_000 * 10**9


def run_cli(args: list[str], timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], check=False, capture_output=True,
                          text=True, timeout=timeout, cwd=ROOT, env=dict(os.environ))


# -- a bag written independently, with rosbags' own serializer ----------------------------
class BagFactory:
    """Writes fleet bags with rosbags' Writer and serializer (no rclpy involved)."""

    def __init__(self) -> None:
        self.store = make_typestore()
        self.t = self.store.types

    def time(self, ns: int):
        return self.t["builtin_interfaces/msg/Time"](sec=ns // 10**9, nanosec=ns % 10**9)

    def header(self, ns: int, frame: str = ""):
        return self.t["std_msgs/msg/Header"](stamp=self.time(ns), frame_id=frame)

    def image(self, ns: int, cam: int, h: int, w: int):
        data = np.full(h * w * 3, (ns // 10**8 + cam * 40) % 256, dtype=np.uint8)
        return self.t["sensor_msgs/msg/Image"](
            header=self.header(ns, f"camera_{cam}"), height=h, width=w, encoding="rgb8",
            is_bigendian=0, step=w * 3, data=data)

    def state(self, ns: int):
        pos = np.sin(np.arange(D) + ns / 1e9)
        return self.t["sensor_msgs/msg/JointState"](
            header=self.header(ns), name=[f"joint_{i}" for i in range(D)], position=pos,
            velocity=np.zeros(0), effort=np.zeros(0))

    def request(self, ns: int, robot: str, seq: int, budget: float):
        return self.t["xinfer_ros/msg/PolicyRequest"](
            header=self.header(ns), robot_id=robot, seq=seq, budget_ms=budget,
            commit_steps=8, keyframe_spacing_s=0.03, prev_chunk=np.zeros(0, np.float32),
            prev_horizon=0, prev_action_dim=0, instruction="pick up the parcel",
            # Recorded from a fleet of several servers: the replay's one unnamed server
            # still answers (the player readdresses requests to any server).
            server="gpu_a", prev_shift=0)

    def chunk(self, ns: int, robot: str, seq: int, *, actions: np.ndarray, stamps: list[int],
              state_ns: int):
        timing = self.t["xinfer_ros/msg/StageTiming"](
            queue_ms=1.0, vit_ms=1.0, prefill_ms=1.0, action_ms=1.0, output_ms=0.1,
            server_total_ms=20.0, hold_ms=0.0, budget_ms=150.0, budget_met=True)
        return self.t["xinfer_ros/msg/ActionChunk"](
            header=self.header(ns), robot_id=robot, seq=seq, status=0, reason="",
            horizon=H, action_dim=D, keyframe_spacing_s=0.03, commit_steps=8,
            actions=actions.astype(np.float32).ravel(),
            image_stamps=[self.time(s) for s in stamps], state_stamp=self.time(state_ns),
            timing=timing, server="gpu_a")

    def write(self, path: Path, *, robot: str = "robot_1", seconds: float = 2.0,
              extra_topic: bool = True, with_chunks: bool = False,
              garbage_requests: int = 0) -> None:
        """A bag of ``seconds`` of one robot; optionally a foreign topic and bad messages."""
        with Writer(path, version=8, storage_plugin=StoragePlugin.MCAP) as writer:
            conns = {t.name: writer.add_connection(t.name, t.msgtype, typestore=self.store,
                                                   offered_qos_profiles=[t.qos])
                     for t in fleet_topics([robot], 3)}
            foreign = None
            if extra_topic:
                self.store.register(get_types_from_msg("int32 spin\nstring label",
                                                       "acme_msgs/msg/Widget"))
                foreign = writer.add_connection("/acme/widget", "acme_msgs/msg/Widget",
                                                typestore=self.store)
            events = []
            for k in range(int(seconds * 50)):
                ns = T0 + k * 20_000_000
                events.append((ns + 1_000, f"/{robot}/joint_states", self.state(ns)))
                if k % 5 == 0:
                    events += [(ns + 2_000 + c, f"/{robot}/camera_{c}/image_raw",
                                self.image(ns, c, h, w)) for c, (h, w) in enumerate(SHAPES)]
                if k % 10 == 5:
                    seq = k // 10 + 1
                    events.append((ns + 3_000, f"/{robot}/policy_request",
                                   self.request(ns, robot, seq, 150.0)))
                    if with_chunks:
                        acts = np.full((H, D), seq, np.float32)
                        cam_ns = T0 + (k - k % 5) * 20_000_000
                        events.append((ns + 40_000_000, f"/{robot}/action_chunk",
                                       self.chunk(ns, robot, seq, actions=acts, stamps=[cam_ns] * 3,
                                                  state_ns=ns)))
                if k == 0:
                    events.append((ns, f"/{robot}/budget", self.t["xinfer_ros/msg/ResponseBudget"](
                        header=self.header(ns), budget_ms=150.0, phase="transport",
                        source="test")))
                if foreign is not None and k % 25 == 0:
                    events.append((ns, "/acme/widget",
                                   self.t["acme_msgs/msg/Widget"](spin=k, label="x")))
            for ns, topic, msg in sorted(events, key=lambda e: e[0]):
                conn = foreign if topic == "/acme/widget" else conns[topic]
                writer.write(conn, ns, self.store.serialize_cdr(msg, conn.msgtype))
            for i in range(garbage_requests):
                writer.write(conns[f"/{robot}/policy_request"], T0 + int(seconds * 1e9) + i,
                             b"\x00\x01\x00\x00\xff\xff\xff\x7f")


@pytest.fixture(scope="module")
def factory() -> BagFactory:
    return BagFactory()


@pytest.fixture(scope="module")
def written_bag(tmp_path_factory, factory) -> Path:
    path = tmp_path_factory.mktemp("written") / "bag"
    factory.write(path)
    return path


def _config_without_action_workers(tmp_path: Path) -> Path:
    """The shipped configuration with the Action stage in the server's own process.

    Each torch replay starts a server; its two Action worker processes each import torch
    and build the model again (about 10 s of this CI machine's 2 cores per replay).
    Chunks are the same either way (test_serving's worker parity tests); the shipped
    configuration with workers is what the fleet and launch tests start.
    """
    shipped = (ROOT / "config" / "fleet.yaml").read_text()
    assert shipped.count("action_processes: 2") == 1
    config = tmp_path / "fleet_in_process.yaml"
    config.write_text(shipped.replace("action_processes: 2", "action_processes: 0"))
    return config


# -- the recorded sample ------------------------------------------------------------------
@pytest.fixture(scope="module")
def sample_bag(tmp_path_factory) -> Path:
    """A short recording of one simulated robot served by π0 (pi0-tiny, torch)."""
    out = tmp_path_factory.mktemp("sample")
    bag = out / "bag"
    proc = run_cli([str(ROOT / "scripts" / "make_sample_bag.py"), str(bag), "--robots", "1",
                    "--duration", "3", "--logs", str(out / "logs")], timeout=150)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return bag


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_record_then_replay_reproduces_the_actions_exactly(sample_bag, tmp_path) -> None:
    run = scan_bag(sample_bag)
    track = run.robots["robot_1"]
    assert track.cameras == {0, 1, 2} and track.has_state and track.budgets
    assert len(track.requests) >= 5 and len(track.chunks) >= 5
    # Recording starts once the server is connected: every request's answer is in the bag.
    assert all(q.seq in track.chunks for q in track.requests[:-2])
    assert (sample_bag / "metadata.yaml").is_file()

    # A pair is comparable when the server used the same frames as in the recording;
    # best-effort camera frames lost in transport can leave none in a short run, which
    # is inconclusive rather than wrong: one more replay then.
    for attempt in range(2):
        report_path = tmp_path / f"report_{attempt}.json"
        proc = run_cli(["-m", "xinfer_ros.cli.replay", str(sample_bag), "--backend", "torch",
                        "--config", str(_config_without_action_workers(tmp_path)),
                        "--model", "pi0-tiny", "--require-identical", "--max-action-rms", "0",
                        "--max-attainment-drop", "none", "--json", str(report_path),
                        "--out", str(tmp_path)], timeout=180)
        report = json.loads(report_path.read_text())
        actions = report["total"]["actions"]
        if actions["comparable"] >= 1:
            break
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert actions["comparable"] >= 1, proc.stdout
    assert actions["identical"] == actions["comparable"]
    assert actions["all_identical"] and actions["max_abs"] == 0.0 and actions["rms"] == 0.0
    assert "actions match exactly" in proc.stdout
    robot = report["robots"]["robot_1"]
    assert robot["sent"] == len(track.replayable)
    assert robot["before_context"] == len(track.requests) - len(track.replayable)
    assert robot["after"]["statuses"].get("ok", 0) >= 1
    for key in ("attainment", "latency_p50_ms", "latency_p99_ms"):
        assert key in robot["before"] and key in robot["after"]
    assert report["passed"]


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_bag_written_by_rosbags_replays(written_bag, tmp_path) -> None:
    report_path = tmp_path / "report.json"
    proc = run_cli(["-m", "xinfer_ros.cli.replay", str(written_bag), "--backend", "emulated",
                    "--mode", "closed", "--rate", "2", "--json", str(report_path),
                    "--out", str(tmp_path)], timeout=100)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "/acme/widget" in proc.stderr  # the foreign topic is reported, then ignored
    report = json.loads(report_path.read_text())
    after = report["robots"]["robot_1"]["after"]
    assert after["responses"] >= 3, proc.stdout
    assert after["statuses"].get("ok", 0) == after["responses"]


# -- bad input: a clear error, never a hang ------------------------------------------------
@pytest.mark.timeout(30)
def test_unreadable_bags_are_clear_errors(tmp_path, capsys) -> None:
    garbage = tmp_path / "garbage"
    garbage.mkdir()
    (garbage / "garbage.mcap").write_bytes(os.urandom(4096))
    empty = tmp_path / "empty"
    empty.mkdir()
    for bag in (garbage, empty, tmp_path / "missing"):
        assert main([str(bag), "--out", str(tmp_path / "out")]) == EXIT_BAD_INPUT
        err = capsys.readouterr().err
        assert err.startswith("error: ") and str(bag) in err


@pytest.mark.timeout(30)
def test_bag_missing_topics_is_an_error(tmp_path, factory, capsys) -> None:
    bag = tmp_path / "states_only"
    store = factory.store
    with Writer(bag, version=8, storage_plugin=StoragePlugin.MCAP) as writer:
        conn = writer.add_connection("/robot_1/joint_states", "sensor_msgs/msg/JointState",
                                     typestore=store)
        for k in range(5):
            writer.write(conn, T0 + k, store.serialize_cdr(factory.state(T0 + k),
                                                           conn.msgtype))
    assert main([str(bag), "--out", str(tmp_path / "out")]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert "nothing to replay" in err and "no policy_request" in err


@pytest.mark.timeout(30)
def test_truncated_bag_is_salvaged_up_to_the_damage(written_bag, tmp_path) -> None:
    bag = tmp_path / "truncated"
    shutil.copytree(written_bag, bag)
    mcap = next(bag.glob("*.mcap"))
    data = mcap.read_bytes()
    mcap.write_bytes(data[: len(data) * 2 // 3])  # no footer, no summary, cut mid-record
    (bag / "metadata.yaml").unlink()  # as a killed recorder leaves it
    run = scan_bag(bag)
    assert run.source.salvaged
    assert any("salvag" in w for w in run.warnings)
    assert run.source.read_error and "truncated" in run.source.read_error
    full = scan_bag(written_bag).robots["robot_1"]
    part = run.robots["robot_1"]
    assert 0 < len(part.requests) < len(full.requests)
    assert part.requests == full.requests[: len(part.requests)]


def _top_level_chunks(data: bytes) -> list[int]:
    pos, found = 8, []
    while pos < len(data) and data[pos] != 0x02:  # up to the footer
        if data[pos] == 0x06:
            found.append(pos)
        pos += 9 + struct.unpack_from("<Q", data, pos + 1)[0]
    return found


@pytest.mark.timeout(30)
def test_damaged_chunk_in_the_middle_is_skipped_and_reported(written_bag, tmp_path) -> None:
    bag = tmp_path / "damaged"
    shutil.copytree(written_bag, bag)
    mcap = next(bag.glob("*.mcap"))
    data = bytearray(mcap.read_bytes())
    chunks = _top_level_chunks(bytes(data))
    assert len(chunks) >= 4
    # Break the length of the first record inside a middle chunk (uncompressed chunk:
    # 9-byte record header, 28 bytes of times/size/crc, empty compression string, size).
    struct.pack_into("<Q", data, chunks[len(chunks) // 2] + 9 + 28 + 4 + 8 + 1, 2**40)
    mcap.write_bytes(bytes(data))
    run = scan_bag(bag)
    assert run.source.salvaged
    assert any("damaged" in w for w in run.warnings), run.warnings
    full = scan_bag(written_bag).robots["robot_1"]
    assert 0 < len(run.robots["robot_1"].requests) <= len(full.requests)
    assert run.robots["robot_1"].requests[-1] == full.requests[-1]  # read past the damage


@pytest.mark.timeout(30)
def test_undecodable_messages_are_skipped_and_counted(tmp_path, factory) -> None:
    bag = tmp_path / "partly_corrupt"
    factory.write(bag, extra_topic=False, garbage_requests=3)
    run = scan_bag(bag)
    assert run.skipped == {"/robot_1/policy_request": 3}
    assert len(run.bad) == 3
    assert any("undecodable" in w for w in run.warnings)
    assert len(run.robots["robot_1"].requests) == 10


@pytest.mark.timeout(30)
def test_wrong_type_on_a_fleet_topic_is_ignored_with_a_warning(tmp_path, factory) -> None:
    bag = tmp_path / "wrong_type"
    store = factory.store
    with Writer(bag, version=8, storage_plugin=StoragePlugin.SQLITE3) as writer:
        conn = writer.add_connection("/robot_1/policy_request", "std_msgs/msg/String",
                                     typestore=store)
        writer.write(conn, T0, store.serialize_cdr(
            store.types["std_msgs/msg/String"](data="hello"), conn.msgtype))
    with pytest.raises(BagError, match="no fleet topics"):
        scan_bag(bag)


# -- the report's thresholds ---------------------------------------------------------------
def _result_for(run, latency_s: float, shift: float = 0.0) -> PlayResult:
    result = PlayResult(sent={"robot_1": []}, chunks={"robot_1": {}})
    for q in run.robots["robot_1"].replayable:
        result.sent["robot_1"].append(SentRequest(q.seq, q.stamp_ns, q.budget_ms, q.log_ns))
        rec = run.robots["robot_1"].chunks[q.seq]
        result.chunks["robot_1"][q.seq] = RecordedChunk(
            q.seq, q.stamp_ns + int(latency_s * 1e9), 0, "", rec.actions + np.float32(shift),
            rec.image_stamps, rec.state_stamp, 1.0)
    return result


@pytest.mark.timeout(30)
def test_thresholds_decide_pass_and_fail(tmp_path, factory) -> None:
    bag = tmp_path / "with_chunks"
    factory.write(bag, extra_topic=False, with_chunks=True)
    run = scan_bag(bag)
    same = build_report(run, _result_for(run, 0.040), Thresholds(require_identical=True,
                                                                 max_action_rms=0.0))
    assert same.passed, same.checks
    assert same.total.before is not None and same.total.before.attainment == 1.0
    assert same.total.actions.identical == len(run.robots["robot_1"].chunks)

    slow = build_report(run, _result_for(run, 0.400), Thresholds(max_attainment_drop=0.02))
    assert not slow.passed
    assert slow.total.after.attainment == 0.0
    assert {c.check for c in slow.checks if not c.passed} == {"attainment_drop"}

    drift = build_report(run, _result_for(run, 0.040, shift=0.01),
                         Thresholds(max_action_rms=1e-3))
    assert not drift.passed
    assert drift.total.actions.rms == pytest.approx(0.01, rel=1e-3)


# -- plain robot bags: their own topic names, no requests, mapped ---------------------------
PLAIN_ROBOTS = ("arm_7", "arm_8")


def write_plain_bag(factory: BagFactory, path: Path, storage: StoragePlugin, *,
                    seconds: float = 3.0, budget_topic: bool = False, skew_ns: int = 0,
                    dead_camera: bool = False) -> None:
    """What ``ros2 bag record`` on two robots leaves: a raw and a JPEG camera each, joint
    states, maybe a Float64 budget, nothing of the fleet's. ``skew_ns`` puts the robots'
    header stamps that far from the recorder's log times."""
    import cv2

    store, t = factory.store, factory.t
    with Writer(path, version=8, storage_plugin=storage) as writer:
        conns = {}
        for robot in PLAIN_ROBOTS:
            for topic, kind in ((f"/{robot}/cam_front/image_raw", "sensor_msgs/msg/Image"),
                                (f"/{robot}/cam_wrist/compressed",
                                 "sensor_msgs/msg/CompressedImage"),
                                (f"/{robot}/joint_states", "sensor_msgs/msg/JointState"),
                                *([(f"/{robot}/budget_ms", "std_msgs/msg/Float64")]
                                  if budget_topic else [])):
                conns[topic] = writer.add_connection(topic, kind, typestore=store)
        if dead_camera:  # recorded, but its driver never published
            writer.add_connection("/arm_7/cam_dead/image_raw", "sensor_msgs/msg/Image",
                                  typestore=store)
        events = []
        for k in range(int(seconds * 50)):
            log = T0 + k * 20_000_000
            ns = log + skew_ns  # the robot's clock
            for r, robot in enumerate(PLAIN_ROBOTS):
                events.append((log + 1_000 + r, f"/{robot}/joint_states", factory.state(ns)))
                if k % 3 == 0:
                    events.append((log + 2_000 + r, f"/{robot}/cam_front/image_raw",
                                   factory.image(ns, 0, 120, 160)))
                    frame = np.full((96, 128, 3), (k * 7 + r * 50) % 256, np.uint8)
                    ok, jpeg = cv2.imencode(".jpg", frame)
                    assert ok
                    events.append((log + 3_000 + r, f"/{robot}/cam_wrist/compressed",
                                   t["sensor_msgs/msg/CompressedImage"](
                                       header=factory.header(ns, "wrist"), format="jpeg",
                                       data=jpeg.ravel())))
                # The first budget comes a second in: made-up requests wait for it.
                if budget_topic and k % 50 == 0 and k:
                    events.append((log + r, f"/{robot}/budget_ms",
                                   t["std_msgs/msg/Float64"](data=300.0 if k % 100 else 400.0)))
        for ns, topic, msg in sorted(events, key=lambda e: e[0]):
            conn = conns[topic]
            writer.write(conn, ns, store.serialize_cdr(msg, conn.msgtype))


def _mapping_flags(budget_topic: bool = False) -> list[str]:
    flags = []
    for robot in PLAIN_ROBOTS:
        flags += ["--robot", robot, "--camera", f"/{robot}/cam_front/image_raw",
                  "--camera", f"/{robot}/cam_wrist/compressed",
                  "--state", f"/{robot}/joint_states"]
        if budget_topic:
            flags += ["--budget-topic", f"/{robot}/budget_ms"]
    return flags


@pytest.mark.timeout(30)
def test_a_mapping_reads_a_plain_bag_without_ros(tmp_path, factory) -> None:
    from xinfer_ros.bags.mapping import TopicMapping

    bag = tmp_path / "plain"
    write_plain_bag(factory, bag, StoragePlugin.SQLITE3, budget_topic=True)
    args = build_parser().parse_args([str(bag), *_mapping_flags(budget_topic=True)])
    mapping = TopicMapping.from_flags(args.mapping_flags)
    run = scan_bag(bag, mapping=mapping)
    assert set(run.robots) == set(PLAIN_ROBOTS) and run.source.storage == "sqlite3"
    track = run.robots["arm_8"]
    assert track.synthetic and track.cameras == {0, 1} and track.has_state
    assert not track.requests and not track.chunks and track.context_ns is not None
    assert track.budgets[:2] == [(T0 + 1_000_000_000 + 1, 300.0),
                                 (T0 + 2_000_000_000 + 1, 400.0)]
    wrist = run.topics["/arm_8/cam_wrist/compressed"]
    assert wrist.compressed and wrist.target == "/arm_8/camera_1/image_raw/compressed"
    assert run.topics["/arm_8/joint_states"].target == "/arm_8/joint_states"
    assert not run.topics["/arm_8/budget_ms"].replayed


@pytest.mark.parametrize(("flags", "needle"), [
    (["--robot", "arm_7", "--camera", "/arm_7/nope", "--state", "/arm_7/joint_states",
      "--budget-ms", "300"], "topic /arm_7/nope is not in the bag"),
    (["--robot", "arm_7", "--camera", "/arm_7/joint_states", "--state", "/arm_7/joint_states"],
     "mapped twice"),
    (["--camera", "/arm_7/cam_front/image_raw"], "before any --robot"),
    (["--robot", "arm_7", "--camera", "/arm_7/cam_front/image_raw", "--state",
      "/arm_7/joint_states"], "no budget topic: give --budget-ms or --budget-pattern"),
    (["--robot", "arm_7", "--camera", "/arm_7/joint_states", "--state",
      "/arm_7/cam_front/image_raw", "--budget-ms", "300"], "carries sensor_msgs/msg/JointState"),
    (["--robot", "arm_7", "--camera", "/arm_7/cam_front/image_raw", "--state",
      "/arm_7/joint_states", "--budget-ms", "300", "--mode", "open"], "replays --mode closed"),
])
@pytest.mark.timeout(30)
def test_a_bad_mapping_is_refused_with_a_reason(tmp_path, factory, capsys, flags,
                                                 needle) -> None:
    bag = tmp_path / "plain"
    write_plain_bag(factory, bag, StoragePlugin.MCAP, seconds=0.5)
    assert main([str(bag), *flags, "--out", str(tmp_path)]) == EXIT_BAD_INPUT
    assert needle in capsys.readouterr().err


@pytest.mark.timeout(30)
def test_a_bag_without_recorded_chunks_reports_before_as_not_available(tmp_path,
                                                                      factory) -> None:
    from xinfer_ros.bags.report import format_report

    bag = tmp_path / "requests_only"
    factory.write(bag, extra_topic=False)
    run = scan_bag(bag)
    result = PlayResult(sent={"robot_1": []}, chunks={"robot_1": {}})
    for q in run.robots["robot_1"].replayable:
        result.sent["robot_1"].append(SentRequest(q.seq, q.stamp_ns, q.budget_ms, q.log_ns))
        result.chunks["robot_1"][q.seq] = RecordedChunk(
            q.seq, q.stamp_ns + 40_000_000, 0, "", np.zeros((H, D), np.float32), (), 0, 1.0)
    report = build_report(run, result, Thresholds(max_attainment_drop=0.02,
                                                  max_p99_increase_ms=5.0))
    assert report.robots["robot_1"].before is None
    assert report.total.before is None and report.total.delta is None
    assert report.total.after.attainment == 1.0
    assert report.checks == [] and report.passed  # nothing to compare against
    # The file says so too: null, never 0.
    written = report.to_dict()
    assert written["total"]["before"] is None and written["robots"]["robot_1"]["delta"] is None
    table = format_report(report)
    assert "n/a" in table and not re.search(r"(?<![\d.])0\.0%", table)


@pytest.mark.slow
@pytest.mark.parametrize("storage", [StoragePlugin.MCAP, StoragePlugin.SQLITE3])
@pytest.mark.timeout(150)
def test_a_plain_robot_bag_replays_closed_loop_through_a_mapping(storage, tmp_path,
                                                                factory) -> None:
    bag = tmp_path / "plain"
    write_plain_bag(factory, bag, storage, budget_topic=storage == StoragePlugin.SQLITE3)
    report_path = tmp_path / "report.json"
    budget = (["--budget-pattern", "phases"] if storage == StoragePlugin.MCAP else [])
    proc = run_cli(["-m", "xinfer_ros.cli.replay", str(bag), "--backend", "emulated",
                    *_mapping_flags(budget_topic=storage == StoragePlugin.SQLITE3), *budget,
                    "--json", str(report_path), "--out", str(tmp_path)], timeout=130)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(report_path.read_text())
    assert report["mode"] == "closed"
    for robot in PLAIN_ROBOTS:
        sec = report["robots"][robot]
        assert sec["before"] is None, sec
        assert sec["after"]["responses"] >= 5, proc.stdout
        assert sec["after"]["statuses"] == {"ok": sec["after"]["requests"]}, sec
    published = report["published"]
    assert published["image"] > 0 and published["joint_states"] > 0
    assert "n/a" in proc.stdout
    figure = Path(report["figure"])
    assert figure == report_path.with_suffix(".png") and figure.stat().st_size > 10_000


@pytest.mark.slow
@pytest.mark.timeout(420)
def test_golden_bag_passes_the_same_model_and_fails_a_changed_one(tmp_path, factory) -> None:
    import xml.etree.ElementTree as ET

    import yaml

    bag = tmp_path / "plain"
    write_plain_bag(factory, bag, StoragePlugin.MCAP)
    golden = tmp_path / "golden"
    served = ["--backend", "torch", "--out", str(tmp_path),
              "--config", str(_config_without_action_workers(tmp_path))]

    def replay(*extra: str, model: str = "pi0-tiny", name: str) -> tuple[int, dict, str]:
        report_path = tmp_path / f"{name}.json"
        proc = run_cli(["-m", "xinfer_ros.cli.replay", str(bag), *_mapping_flags(),
                        "--model", model, *served, *extra, "--json", str(report_path)],
                       timeout=180)
        assert report_path.is_file(), proc.stdout + proc.stderr
        return proc.returncode, json.loads(report_path.read_text()), proc.stdout + proc.stderr

    code, first, out = replay("--budget-ms", "400", "--save-golden", str(golden), name="first")
    assert code == 0, out
    assert (golden / "metadata.yaml").is_file() and "golden bag:" in out
    saved = scan_bag(golden)
    assert set(saved.robots) == set(PLAIN_ROBOTS)
    answered = first["total"]["sent"] - first["total"]["unanswered"]
    assert sum(len(t.chunks) for t in saved.robots.values()) == answered

    strict = ("--golden", str(golden), "--require-identical", "--max-action-rms", "0",
              "--max-attainment-drop", "none")
    code, same, out = replay(*strict, "--junit", str(tmp_path / "same.xml"), name="same")
    assert code == 0, out
    actions = same["total"]["actions"]
    assert same["mode"] == "open" and actions["comparable"] >= 5, actions
    assert actions["all_identical"] and actions["max_abs"] == 0.0
    suite = ET.parse(tmp_path / "same.xml").getroot()
    cases = {(c.get("classname"), c.get("name")) for c in suite.iter("testcase")}
    assert ("xinfer-replay.arm_7", "actions_identical") in cases
    assert ("xinfer-replay.ALL", "answered") in cases
    assert suite.get("failures") == "0"

    preset = yaml.safe_load((ROOT / "config" / "models" / "pi0-tiny.yaml").read_text())
    changed = tmp_path / "pi0-tiny-reseeded.yaml"
    changed.write_text(yaml.safe_dump({**preset, "name": "pi0-tiny-reseeded", "seed": 1}))
    code, other, out = replay(*strict, "--junit", str(tmp_path / "other.xml"),
                              model=str(changed), name="other")
    assert code == 1, out
    assert other["total"]["actions"]["comparable"] >= 5 and not other["passed"]
    assert other["total"]["actions"]["max_abs"] > 0.0
    suite = ET.parse(tmp_path / "other.xml").getroot()
    assert int(suite.get("failures")) >= 1
    failed = [c for c in suite.iter("testcase") if c.find("failure") is not None]
    assert {c.get("name") for c in failed} >= {"actions_identical", "action_rms"}


@pytest.mark.timeout(30)
def test_clock_skew_between_robot_and_recorder_is_measured_and_reported(tmp_path,
                                                                       factory) -> None:
    from xinfer_ros.bags.mapping import TopicMapping
    from xinfer_ros.cli.replay import _clock_warnings

    bag = tmp_path / "skewed"
    write_plain_bag(factory, bag, StoragePlugin.MCAP, seconds=1.0, skew_ns=2_500_000_000)
    args = build_parser().parse_args([str(bag), *_mapping_flags()])
    run = scan_bag(bag, mapping=TopicMapping.from_flags(args.mapping_flags))
    # Header stamps 2.5 s ahead, logged 1-3 us after them.
    assert run.robots["arm_7"].clock_offset_ns == pytest.approx(2_500_000_000, abs=5_000)
    (note, _) = _clock_warnings(run, 100.0)
    assert note.startswith("arm_7: header stamps are +2500.0 ms from the recorder's log times")
    assert _clock_warnings(run, 3000.0) == []


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_made_up_requests_follow_a_skewed_robot_clock(tmp_path, factory) -> None:
    # Stamped on the recorder's time line, every request would precede all frames by
    # 2.5 s and be refused; on the robot's clock each picks a recent frame.
    bag = tmp_path / "skewed"
    write_plain_bag(factory, bag, StoragePlugin.MCAP, skew_ns=2_500_000_000)
    report_path = tmp_path / "report.json"
    proc = run_cli(["-m", "xinfer_ros.cli.replay", str(bag), "--backend", "emulated",
                    *_mapping_flags(), "--budget-ms", "400", "--json", str(report_path),
                    "--out", str(tmp_path)], timeout=100)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "clock skew between robot and recorder" in proc.stderr
    report = json.loads(report_path.read_text())
    for robot in PLAIN_ROBOTS:
        sec = report["robots"][robot]
        assert sec["clock_offset_ms"] == pytest.approx(2500.0, abs=0.01)
        assert sec["after"]["statuses"] == {"ok": sec["after"]["requests"]}, sec


def write_vga_sensor_bag(factory: BagFactory, path: Path, seconds: float) -> None:
    """One robot's sensor bag: three 640x480 rgb8 cameras at 10 Hz, joints at 50 Hz."""
    store = factory.store
    rng = np.random.default_rng(0)
    with Writer(path, version=8, storage_plugin=StoragePlugin.MCAP) as writer:
        cams = [writer.add_connection(f"/arm/cam_{c}/image_raw", "sensor_msgs/msg/Image",
                                      typestore=store) for c in range(3)]
        joints = writer.add_connection("/arm/joint_states", "sensor_msgs/msg/JointState",
                                       typestore=store)
        for k in range(int(seconds * 50)):
            ns = T0 + k * 20_000_000
            writer.write(joints, ns + 1_000, store.serialize_cdr(factory.state(ns),
                                                                 joints.msgtype))
            if k % 5:
                continue
            for c, conn in enumerate(cams):
                msg = factory.image(ns, c, 480, 640)
                msg.data = rng.integers(0, 256, msg.data.size, dtype=np.uint8)
                writer.write(conn, ns + 2_000 + c, store.serialize_cdr(msg, conn.msgtype))


@pytest.mark.slow
@pytest.mark.extended
@pytest.mark.timeout(240)
def test_a_three_camera_vga_sensor_bag_replays_with_its_frames_on_time(tmp_path,
                                                                        factory) -> None:
    # 900 KiB frames exceed Fast DDS's default 512 KiB shared-memory segment: with it,
    # a loaded two-core machine lost a third of the frames and rejected 13-27 % of the
    # requests as "camera image ... s old"; the player's own larger segment loses none.
    bag = tmp_path / "vga"
    write_vga_sensor_bag(factory, bag, seconds=12.0)
    report_path = tmp_path / "report.json"
    flags = ["--robot", "arm", *(f for c in range(3)
                                 for f in ("--camera", f"/arm/cam_{c}/image_raw")),
             "--state", "/arm/joint_states"]
    # A budget far above the emulated model's latency: what is measured is whether the
    # frames arrive, not whether a loaded machine meets a tight deadline.
    proc = run_cli(["-m", "xinfer_ros.cli.replay", str(bag), "--backend", "emulated", *flags,
                    "--budget-ms", "2000", "--json", str(report_path), "--out",
                    str(tmp_path)], timeout=200)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "this process's segment 64 MiB" in proc.stdout
    report = json.loads(report_path.read_text())
    after = report["robots"]["arm"]["after"]
    ok = after["statuses"].get("ok", 0)
    assert after["requests"] >= 50 and ok >= 0.98 * after["requests"], (after, proc.stdout)
    player = report["player"]
    assert player["messages"] == 12 * (50 + 30)
    assert player["max_ms"] is not None and player["max_ms"] >= player["p99_ms"] >= 0
    assert "behind schedule P50" in proc.stdout


def test_player_lateness_counts_late_messages_and_says_so() -> None:
    from xinfer_ros.bags.report import _lateness_warning, player_lateness

    on_time = player_lateness([0.001] * 99 + [0.02])
    assert on_time.late == 0 and _lateness_warning(on_time) is None
    assert on_time.max_ms == pytest.approx(20.0)
    behind = player_lateness([0.001] * 97 + [0.15, 0.3, 0.45])
    assert behind.late == 3 and behind.max_ms == pytest.approx(450.0)
    warning = _lateness_warning(behind)
    assert warning is not None and "3 of 100 messages published over 100 ms late, at most " \
        "450 ms" in warning
    assert player_lateness([]).max_ms is None


def test_the_player_gets_a_large_segment_unless_the_user_configured_dds(tmp_path,
                                                                        monkeypatch) -> None:
    from xinfer_ros.nodes.shm_transport import use_large_segment

    for var in ("RMW_IMPLEMENTATION", "FASTDDS_DEFAULT_PROFILES_FILE",
                "FASTRTPS_DEFAULT_PROFILES_FILE", "FASTDDS_BUILTIN_TRANSPORTS"):
        monkeypatch.setenv(var, "")  # unset for the function, restored afterwards
    assert "segment 64 MiB" in use_large_segment(tmp_path)
    profile = Path(os.environ["FASTDDS_DEFAULT_PROFILES_FILE"])
    assert profile.parent == tmp_path and "<segment_size>67108864<" in profile.read_text()
    monkeypatch.setenv("FASTDDS_DEFAULT_PROFILES_FILE", "/etc/site.xml")
    assert "as FASTDDS_DEFAULT_PROFILES_FILE says" in use_large_segment(tmp_path)
    assert os.environ["FASTDDS_DEFAULT_PROFILES_FILE"] == "/etc/site.xml"
    monkeypatch.setenv("RMW_IMPLEMENTATION", "rmw_cyclonedds_cpp")
    assert "rmw_cyclonedds_cpp's own" in use_large_segment(tmp_path)


@pytest.mark.timeout(30)
def test_a_yaml_mapping_equals_the_flags_and_bad_files_are_refused(tmp_path) -> None:
    from xinfer_ros.bags.mapping import MappingError, TopicMapping

    good = tmp_path / "map.yaml"
    good.write_text(
        "robots:\n"
        "  arm_7:\n"
        "    cameras: [/arm_7/cam_front/image_raw, /arm_7/cam_wrist/compressed]\n"
        "    state: /arm_7/joint_states\n"
        "    budget: /arm_7/budget_ms\n"
        "  arm_8:\n"
        "    cameras: [/arm_8/cam_front/image_raw, /arm_8/cam_wrist/compressed]\n"
        "    state: /arm_8/joint_states\n"
        "    budget: /arm_8/budget_ms\n")
    flags = build_parser().parse_args(["bag", *_mapping_flags(budget_topic=True)])
    assert TopicMapping.from_yaml(good) == TopicMapping.from_flags(flags.mapping_flags)
    for text, needle in (("robots: [arm_7]", "expected a 'robots:' mapping"),
                         ("robots:\n  arm_7: {state: /s}", "expected 'cameras: [topics]'"),
                         ("robots:\n  7arm: {cameras: [/c], state: /s}", "not a valid namespace"),
                         ("robots:\n  arm_7: {cameras: [/c]}", "no joint state topic"),
                         ("robots: {}", "names no robot"),
                         ("robots:\n  a: {cameras: [/c], state: /s}\n"
                          "  b: {cameras: [/c], state: /t}", "mapped to both a and b"),
                         (": : :", "map.yaml")):
        good.write_text(text)
        with pytest.raises(MappingError, match=re.escape(needle)):
            TopicMapping.from_yaml(good)
    with pytest.raises(MappingError, match=r"[Nn]o such file"):
        TopicMapping.from_yaml(tmp_path / "missing.yaml")


@pytest.mark.timeout(30)
def test_a_mapped_camera_without_messages_leaves_its_robot_out(tmp_path, factory) -> None:
    from xinfer_ros.bags.mapping import TopicMapping

    bag = tmp_path / "dead"
    write_plain_bag(factory, bag, StoragePlugin.MCAP, seconds=0.5, dead_camera=True)
    args = build_parser().parse_args([str(bag), *_mapping_flags()[:6], "--camera",
                                      "/arm_7/cam_dead/image_raw", *_mapping_flags()[6:]])
    run = scan_bag(bag, mapping=TopicMapping.from_flags(args.mapping_flags))
    assert set(run.robots) == {"arm_8"}
    assert any(w.startswith("arm_7: mapped camera(s) [2] have no readable message")
               for w in run.warnings), run.warnings


@pytest.mark.timeout(30)
def test_replay_refuses_patterns_it_cannot_follow_and_closed_golden_runs(tmp_path, factory,
                                                                         capsys) -> None:
    bag = tmp_path / "plain"
    write_plain_bag(factory, bag, StoragePlugin.MCAP, seconds=0.5)
    for pattern in ("bursty", "custom"):  # extra robots, or budgets of their own
        with pytest.raises(SystemExit) as info:
            main([str(bag), *_mapping_flags(), "--budget-pattern", pattern])
        assert info.value.code == EXIT_BAD_INPUT
    golden = tmp_path / "golden"
    golden.mkdir()
    assert main([str(bag), *_mapping_flags(), "--golden", str(golden), "--mode", "closed",
                 "--out", str(tmp_path)]) == EXIT_BAD_INPUT
    assert "--mode open only" in capsys.readouterr().err


def test_the_server_gets_the_camera_layout_of_a_fleet_bag_with_compressed_cameras() -> None:
    from types import SimpleNamespace

    from xinfer_ros.bags.mapping import MappingError
    from xinfer_ros.bags.types import classify_topic
    from xinfer_ros.cli.replay import _sensor_params

    def run(*names: str) -> SimpleNamespace:
        topics = {n: classify_topic(n) for n in names}
        return SimpleNamespace(robots={t.robot for t in topics.values()}, topics=topics)

    raw = run("/r1/camera_0/image_raw", "/r1/camera_1/image_raw", "/r1/joint_states")
    assert _sensor_params(raw, None) == {}  # the server's own configuration
    mixed = run("/r1/camera_0/image_raw", "/r1/camera_1/image_raw/compressed",
                "/r2/camera_0/image_raw", "/r2/camera_1/image_raw/compressed")
    assert _sensor_params(mixed, None) == {"cameras": 2,
                                           "image_transports": ["raw", "compressed"]}
    with pytest.raises(MappingError, match="one camera layout for all robots"):
        _sensor_params(run("/r1/camera_0/image_raw", "/r2/camera_0/image_raw/compressed"),
                       None)


@pytest.mark.timeout(30)
def test_all_compares_only_robots_that_have_a_before(tmp_path, factory) -> None:
    import dataclasses

    bag = tmp_path / "with_chunks"
    factory.write(bag, extra_topic=False, with_chunks=True)
    run = scan_bag(bag)
    recorded = run.robots["robot_1"]
    run.robots["plain"] = dataclasses.replace(recorded, name="plain", chunks={})
    result = _result_for(run, 0.040)
    # The robot without a before is answered late: it must not drag ALL's comparison.
    result.sent["plain"] = list(result.sent["robot_1"])
    result.chunks["plain"] = {q: dataclasses.replace(c, log_ns=c.log_ns + 10**9)
                              for q, c in result.chunks["robot_1"].items()}
    report = build_report(run, result, Thresholds(max_attainment_drop=0.02))
    assert report.robots["plain"].before is None
    assert report.total.after.attainment == pytest.approx(0.5)
    assert report.total.after_compared is not None
    assert report.total.after_compared.attainment == 1.0
    assert report.total.delta is not None and report.total.delta.attainment == 0.0
    assert report.passed
    assert report.to_dict()["total"]["after_compared"]["attainment"] == 1.0


def test_header_stamps_are_read_from_serialized_messages(factory) -> None:
    from xinfer_ros.bags.scan import cdr_header_stamp_ns

    ns = T0 + 123_456_789
    data = factory.store.serialize_cdr(factory.request(ns, "r1", 7, 90.0),
                                       "xinfer_ros/msg/PolicyRequest")
    assert cdr_header_stamp_ns(bytes(data)) == ns
    assert cdr_header_stamp_ns(b"\\x00\\x01") is None and cdr_header_stamp_ns(b"\\x07" * 16) is None
