"""Golden bags: a replay's requests and answers, saved to compare later runs against.

``xinfer-replay BAG --save-golden OUT`` writes what the replay sent and received as a
fleet-layout MCAP bag: per robot the ``policy_request`` messages as sent (with the
stamps and seq numbers that chose the observations and the noise) and the
``action_chunk`` answers. Both are placed on the source bag's time line: a request at
the point of the recording it was sent at, its answer one measured latency later. A
later ``xinfer-replay BAG --golden OUT`` sends those same requests at those times (open
loop) and compares its answers with the golden ones, as a fleet bag's replay compares
with the recorded chunks. ROS-free (rosbags writes the bag).
"""

from __future__ import annotations

from pathlib import Path

from rosbags.rosbag2 import StoragePlugin, Writer
from rosbags.typesys.store import Typestore

from xinfer_ros.bags.outcome import ReplayOutcome
from xinfer_ros.bags.reader import BagError
from xinfer_ros.bags.scan import RecordedRun, scan_bag
from xinfer_ros.bags.types import BagTopic, TopicKind, make_typestore

__all__ = ["GOLDEN_SOURCE_KEY", "apply_golden", "write_golden"]

#: ``custom_data`` key naming the bag a golden bag was made from.
GOLDEN_SOURCE_KEY = "xinfer_ros.golden_source"


def write_golden(path: Path | str, run: RecordedRun, result: ReplayOutcome,
                 store: Typestore | None = None) -> int:
    """Write a replay's requests and answers as a golden bag.

    Args:
        path: The bag directory to create (must not exist).
        run: The replayed bag.
        result: The player's result (requests and answers with their CDR bytes).
        store: Typestore for the connections (default :func:`make_typestore`).

    Returns:
        The number of answers written.

    Raises:
        BagError: When ``path`` exists or a request or answer has no CDR bytes.
    """
    path = Path(path)
    if path.exists():
        raise BagError(f"{path} exists; a golden bag is never overwritten")
    store = store or make_typestore()
    written = 0
    with Writer(path, version=8, storage_plugin=StoragePlugin.MCAP) as writer:
        writer.set_custom_data(GOLDEN_SOURCE_KEY, str(run.source.path))
        for robot in sorted(result.sent):
            topics = {kind: BagTopic(f"/{robot}/{kind.value}", kind, robot)
                      for kind in (TopicKind.REQUEST, TopicKind.CHUNK)}
            conns = {kind: writer.add_connection(t.name, t.msgtype, typestore=store,
                                                 offered_qos_profiles=[t.qos])
                     for kind, t in topics.items()}
            answers = result.chunks.get(robot, {})
            messages = []
            for sent in result.sent[robot]:
                if not sent.data:
                    raise BagError(f"{robot} request {sent.seq}: no message bytes to save")
                messages.append((sent.bag_ns, TopicKind.REQUEST, sent.data))
                chunk = answers.get(sent.seq)
                if chunk is None:
                    continue
                if not chunk.data:
                    raise BagError(f"{robot} answer {sent.seq}: no message bytes to save")
                latency = max(0, chunk.log_ns - sent.send_ns)
                messages.append((sent.bag_ns + latency, TopicKind.CHUNK, chunk.data))
                written += 1
            messages.sort(key=lambda m: (m[0], m[1] is TopicKind.CHUNK))
            for log_ns, kind, data in messages:
                writer.write(conns[kind], log_ns, data)
    return written


def apply_golden(run: RecordedRun, golden_path: Path | str,
                 store: Typestore | None = None) -> list[str]:
    """Make a golden bag's requests and answers the baseline of ``run``.

    Each robot of ``run`` found in the golden bag replays the golden requests (at their
    times on the recording's time line) and is compared with the golden answers.

    Returns:
        Notes for the report (robots without golden data).

    Raises:
        BagError: When the golden bag is unreadable or shares no robot with ``run``.
    """
    golden = scan_bag(golden_path, store)
    shared = sorted(set(run.robots) & set(golden.robots))
    if not shared:
        raise BagError(f"golden bag {golden_path} has robots {sorted(golden.robots)}; "
                       f"the bag has {sorted(run.robots)}")
    for name in shared:
        track, gold = run.robots[name], golden.robots[name]
        track.requests, track.chunks = list(gold.requests), dict(gold.chunks)
    missing = sorted(set(run.robots) - set(golden.robots))
    for name in missing:
        del run.robots[name]
    return [f"{name}: not in the golden bag; not replayed" for name in missing]
