"""The ROS arms of ``xinfer-bench transport`` (see :mod:`xinfer_ros.cli.bench_transport`).

Closed-loop robots through an ``inference_server`` process on loopback, and the
process that streams their cameras and joint states.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import yaml

from xinfer_ros.core.constants import SEND_PERIOD as PERIOD_S
from xinfer_ros.engine.latency_arms import BUDGET_MS
from xinfer_ros.nodes.runtime import EXECUTOR_PARAM

if TYPE_CHECKING:  # rclpy and the messages load only when a benchmark runs
    from rclpy.executors import Executor
    from rclpy.node import Node
    from rclpy.publisher import Publisher

    from xinfer_ros.msg import ActionChunk

__all__ = ["stream_observations", "through_ros"]


def stream_observations(names: list[str], camera_rate: float, seconds: float) -> None:
    """Publish every robot's cameras and joint states at ``camera_rate`` (own process).

    Robots stream from their own processes in a real fleet; publishing here, apart
    from the process that times requests, keeps image serialization out of the
    measured latency. On a small machine this process shares the cores with the server,
    so it is kept lean (one prebuilt message per camera, the events executor, no QoS
    event handlers): what it costs is a benchmark artefact, not transport overhead.
    """
    import rclpy
    from rclpy.event_handler import PublisherEventCallbacks
    from rclpy.qos import qos_profile_sensor_data
    from sensor_msgs.msg import Image, JointState

    from xinfer_ros.model.config import load_preset
    from xinfer_ros.nodes.runtime import make_executor
    from xinfer_ros.serving.image_conversion import rgb_to_image_fields

    shapes = [(c.height, c.width) for c in load_preset("tiny").cameras]
    frames = [rgb_to_image_fields(np.random.default_rng(i).integers(
        0, 256, (h, w, 3), dtype=np.uint8)) for i, (h, w) in enumerate(shapes)]
    rclpy.init()
    node = rclpy.create_node("transport_bench_cameras")
    quiet = PublisherEventCallbacks(use_default_callbacks=False)
    cams = [(node.create_publisher(Image, f"/{n}/camera_{c}/image_raw",
                                   qos_profile_sensor_data, event_callbacks=quiet),
             Image(**frames[c]))
            for n in names for c in range(len(shapes))]
    joints = [(node.create_publisher(JointState, f"/{n}/joint_states", qos_profile_sensor_data,
                                     event_callbacks=quiet),
               JointState(position=[0.0] * 14)) for n in names]
    turn = [0]

    def publish_next() -> None:
        # One frame per tick, spread over the period, as robot_sim does: bursts of
        # large frames overflow the shared-memory transport and best-effort frames drop.
        pub, msg = cams[turn[0] % len(cams)]
        turn[0] += 1
        msg.header.stamp = node.get_clock().now().to_msg()
        pub.publish(msg)  # serialized here: the message can be reused

    def publish_joints() -> None:
        stamp = node.get_clock().now().to_msg()
        for pub, msg in joints:
            msg.header.stamp = stamp
            pub.publish(msg)

    node.create_timer(1.0 / (camera_rate * len(cams)), publish_next)
    node.create_timer(1.0 / camera_rate, publish_joints)
    executor = make_executor("events")
    executor.add_node(node)
    end = time.monotonic() + seconds
    while time.monotonic() < end and rclpy.ok():
        executor.spin_once(timeout_sec=0.05)
    executor.shutdown()
    node.destroy_node()
    rclpy.try_shutdown()


def through_ros(robots: int, duration: float, warmup: float, camera_rate: float,
                workdir: Path, *, executor: str = str(EXECUTOR_PARAM.default)) -> list[float]:
    """Latencies of closed-loop robots through an inference_server process on loopback.

    The server runs the emulated backend; a separate process streams every robot's
    cameras and joint states, this one sends requests and times the chunks.

    Args:
        robots: Closed-loop robots.
        duration: Measured seconds, warm-up included.
        warmup: Unmeasured seconds at the start.
        camera_rate: Frames per second per camera.
        workdir: Where the server's parameter file goes.
        executor: rclpy executor of the server and of this process (one of
            :data:`~xinfer_ros.nodes.runtime.EXECUTORS`), as a robot's rtc_executor
            would run it.
    """
    import rclpy
    from rclpy.event_handler import PublisherEventCallbacks, SubscriptionEventCallbacks

    from xinfer_ros.msg import ActionChunk, PolicyRequest
    from xinfer_ros.nodes.runtime import make_executor

    names = [f"bench_{i}" for i in range(robots)]
    server, streamer = _start_server_and_streamer(names, camera_rate, duration, workdir,
                                                  executor)
    rclpy.init()
    node = rclpy.create_node("transport_bench")
    tally = _Tally()
    pending: dict[tuple[str, int], float] = {}
    next_send = {n: 0.0 for n in names}
    seqs = {n: 0 for n in names}
    # The timing node needs no QoS event handlers; under a SingleThreadedExecutor each
    # would be re-added to the wait set at every spin.
    pubs = {n: node.create_publisher(
        PolicyRequest, f"/{n}/policy_request", 10,
        event_callbacks=PublisherEventCallbacks(use_default_callbacks=False)) for n in names}

    t_start = time.monotonic()

    def on_chunk(name: str, msg: ActionChunk) -> None:
        sent = pending.pop((name, msg.seq), None)
        if sent is None:
            return
        now = time.monotonic()
        tally.add(msg, now - sent, ok=msg.status == ActionChunk.STATUS_OK,
                  measured=sent >= t_start + warmup)
        next_send[name] = max(sent + PERIOD_S, now)  # Eq. 1

    for n in names:
        node.create_subscription(
            ActionChunk, f"/{n}/action_chunk", lambda m, n=n: on_chunk(n, m), 10,
            event_callbacks=SubscriptionEventCallbacks(use_default_callbacks=False))

    spinner = make_executor(executor)
    spinner.add_node(node)
    # Wait for the server to subscribe before the clock starts.
    _wait_for_server(spinner, pubs[names[-1]])
    t_start = time.monotonic()
    stop = t_start + duration
    cpu_start = _cpu_seconds(server.pid)
    for i, n in enumerate(names):
        next_send[n] = t_start + 0.2 + i * PERIOD_S / robots
    while time.monotonic() < stop:
        _send_due_requests(node, pubs, pending, next_send, seqs)
        spinner.spin_once(timeout_sec=0.002)
    cpu_share = (_cpu_seconds(server.pid) - cpu_start) / (time.monotonic() - t_start)
    spinner.shutdown()
    node.destroy_node()
    rclpy.shutdown()
    for proc in (server, streamer):
        proc.terminate()
        proc.wait(timeout=20)
    tally.report(robots, cpu_share)
    return tally.lat


@dataclass
class _Tally:
    """What the answered chunks of one ``through_ros`` run measured."""

    lat: list[float] = field(default_factory=list)
    split: list[tuple[float, float]] = field(default_factory=list)  # (wire, server overhead) ms
    rejected: list[str] = field(default_factory=list)

    def add(self, msg: ActionChunk, latency: float, *, ok: bool, measured: bool) -> None:
        """Count one chunk that answered a request after ``latency`` seconds.

        Args:
            msg: The ActionChunk.
            latency: From send to receipt (s).
            ok: The chunk's status is OK.
            measured: The request went out after the warm-up.
        """
        if ok and measured:
            self.lat.append(latency)
            t = msg.timing
            engine_ms = t.queue_ms + t.vit_ms + t.prefill_ms + t.action_ms + t.output_ms
            self.split.append((latency * 1e3 - t.server_total_ms,
                               t.server_total_ms - engine_ms))
        elif not ok:
            self.rejected.append(msg.reason)

    def report(self, robots: int, cpu_share: float) -> None:
        """Print the median split of the latency (nothing when no chunk was measured)."""
        if not self.split:
            return
        rejected = self.rejected
        wire, over = np.median(np.asarray(self.split), axis=0)
        print(f"  {robots} robots via ROS: median wire (DDS both ways) {wire:.2f} ms, "
              f"server outside the engine {over:.2f} ms, server CPU {cpu_share:.0%} of a core; "
              f"{len(rejected)} non-OK"
              + (f" (e.g. {rejected[0]})" if rejected else ""))


def _start_server_and_streamer(
    names: list[str], camera_rate: float, duration: float, workdir: Path, executor: str
) -> tuple[subprocess.Popen[bytes], subprocess.Popen[bytes]]:
    """Start the emulated inference_server for ``names`` and the camera streamer."""
    params = workdir / f"server_{len(names)}.yaml"
    params.write_text(yaml.safe_dump({"/**": {"ros__parameters": {
        "robots": names, "backend": "emulated", "model": "tiny", "policy": "xinfer",
        "executor": executor}}}))
    server = subprocess.Popen(
        [sys.executable, "-m", "xinfer_ros.nodes.inference_server", "--ros-args",
         "--params-file", str(params)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        env=dict(os.environ))
    # It outlives the measurement by a wide margin: through_ros terminates it.
    streamer = subprocess.Popen(
        [sys.executable, "-m", "xinfer_ros.nodes.transport_bench", "--stream",
         str(camera_rate), str(duration + 90.0), *names],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=dict(os.environ))
    return server, streamer


def _wait_for_server(spinner: Executor, pub: Publisher) -> None:
    """Spin until the server subscribes to ``pub`` (at most 60 s), then 1 s more."""
    end = time.monotonic() + 60.0
    while time.monotonic() < end and pub.get_subscription_count() == 0:
        spinner.spin_once(timeout_sec=0.05)
    settle = time.monotonic() + 1.0  # let camera frames reach the server
    while time.monotonic() < settle:
        spinner.spin_once(timeout_sec=0.05)


def _send_due_requests(node: Node, pubs: dict[str, Publisher],
                       pending: dict[tuple[str, int], float],
                       next_send: dict[str, float], seqs: dict[str, int]) -> None:
    """Send each robot's next request once its Eq. 1 send time has come (one in flight)."""
    from xinfer_ros.msg import PolicyRequest

    now = time.monotonic()
    for n, pub in pubs.items():
        waiting = any(key[0] == n for key in pending)
        if waiting and now - max(v for k, v in pending.items() if k[0] == n) > 2.0:
            pending.clear()  # a lost request: resend rather than stall
            waiting = False
        if not waiting and now >= next_send[n]:
            seqs[n] += 1
            req = PolicyRequest(robot_id=n, seq=seqs[n], budget_ms=BUDGET_MS,
                                commit_steps=8, keyframe_spacing_s=0.03)
            req.header.stamp = node.get_clock().now().to_msg()
            pending[(n, seqs[n])] = time.monotonic()
            pub.publish(req)


def _cpu_seconds(pid: int) -> float:
    """CPU time (user + system, all threads) a process has used so far; NaN off Linux.

    CPU time rather than wall time: it does not grow when other jobs share the cores,
    so it compares server versions fairly on a busy machine.
    """
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    # Fields 14 and 15 of proc(5) (utime, stime); the split drops the first two.
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


if __name__ == "__main__":
    if len(sys.argv) > 3 and sys.argv[1] == "--stream":
        stream_observations(sys.argv[4:], float(sys.argv[2]), float(sys.argv[3]))
