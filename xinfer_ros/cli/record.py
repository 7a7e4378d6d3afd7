"""``xinfer-record``: record a fleet's inputs and outputs into a rosbag2 bag.

Runs the :mod:`xinfer_ros.nodes.recorder` node in this process for the given robots
(MCAP by default, ``--storage sqlite3`` on request) until Ctrl-C, SIGTERM or
``--duration``. With ``--with-fleet`` it also starts a fleet like ``xinfer-fleet``
(server, executor and simulated robot per robot) and stops it afterwards: the executors
first, so that chunks in flight are recorded, then the rest.

DDS stays on loopback: ``ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST`` is set unless the
caller set it. Recording a fleet that runs already uses the environment's
``ROS_DOMAIN_ID`` (ROS' default 0 when unset), the fleet's; with ``--with-fleet`` a
random one is chosen unless one is set, so the started fleet is private. A recording
that receives nothing within ``--topic-timeout`` seconds, or ends with no message at
all, exits 1 and says so, instead of leaving an empty bag behind as a success.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

from xinfer_ros.fleet.plan import BACKENDS, PlanError, build_fleet_plan, parse_robots

if TYPE_CHECKING:
    from xinfer_ros.nodes.recorder import Recorder
    from xinfer_ros.nodes.runtime import StopFlag

__all__ = ["build_parser", "main", "record", "record_env"]

STORAGES = ("mcap", "sqlite3")
#: Recording continues this long after the executors stopped, for chunks in flight (s).
#: A CPU model on a loaded machine answered after more than 1 s, and its chunks were
#: then missing from the bag.
IN_FLIGHT_GRACE_S = 3.0


def build_parser() -> argparse.ArgumentParser:
    """The command-line parser."""
    p = argparse.ArgumentParser(prog="xinfer-record", description=__doc__.splitlines()[0])
    p.add_argument("-o", "--output", type=Path, default=None,
                   help="bag directory to create (default out/bags/fleet_<UTC time>)")
    p.add_argument("--robots", default="1", help="robot count or comma-separated names")
    p.add_argument("--cameras", type=int, default=3, help="cameras per robot")
    p.add_argument("--storage", choices=STORAGES, default="mcap", help="bag storage")
    p.add_argument("--bag-version", type=int, choices=(8, 9), default=8,
                   help="rosbag2 metadata version (8 reads on Jazzy and Kilted)")
    p.add_argument("--distro", default="", help="typestore: humble, jazzy, kilted")
    p.add_argument("--no-images", action="store_true", help="do not record camera images")
    p.add_argument("--duration", type=float, default=0.0,
                   help="stop after this many seconds (0: until Ctrl-C/SIGTERM)")
    p.add_argument("--ready-timeout", type=float, default=120.0,
                   help="with --with-fleet: longest wait for the server to come up (s)")
    p.add_argument("--topic-timeout", type=float, default=10.0,
                   help="fail (exit 1) when no recorded topic delivered a message within "
                        "this many seconds of the start (0: wait forever)")
    fleet = p.add_argument_group("fleet", "start a fleet and record it")
    fleet.add_argument("--with-fleet", action="store_true",
                       help="start server, executors and simulated robots (xinfer-fleet's plan)")
    fleet.add_argument("--backend", choices=BACKENDS, default=None, help="model backend")
    fleet.add_argument("--model", default=None, help="model preset")
    fleet.add_argument("--model-path", default=None, metavar="DIR",
                       help="checkpoint directory of the model (π0: either layout)")
    fleet.add_argument("--policy", default=None, help="scheduling policy")
    fleet.add_argument("--workload", default="phases", help="budget pattern of the robots")
    fleet.add_argument("--config", type=Path, default=None, help="server parameter file")
    fleet.add_argument("--seed", type=int, default=0, help="seed of the robots' workload")
    fleet.add_argument("--logs", type=Path, default=None,
                       help="directory for the fleet's node logs (default: a temp dir)")
    return p


def _default_output() -> Path:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d_%H%M%S")
    return Path("out/bags") / f"fleet_{stamp}"


class _FleetStopper:
    """The stop condition of a recording with a fleet attached.

    Recording starts once the recorder is connected to every topic (bounded by
    ``ready_s``); ``duration`` counts from then. At the end (or on a signal) it stops
    the executors, so no new request goes out, keeps recording for
    :data:`IN_FLIGHT_GRACE_S` so answers in flight land in the bag, then ends.
    """

    def __init__(self, procs: dict[str, subprocess.Popen], recorder: Recorder, duration: float,
                 ready_s: float, signalled: Callable[[], bool]) -> None:
        self.procs = procs
        self.recorder = recorder
        self.duration = duration
        self.arm_by = time.monotonic() + ready_s
        self.deadline = float("inf")
        self.signalled = signalled
        self.stopping_at: float | None = None
        self.died: list[str] = []
        recorder.armed = False

    def __call__(self) -> bool:
        now = time.monotonic()
        if not self.recorder.armed and self.recorder.arm_when_matched(self.arm_by):
            self.deadline = now + self.duration
        if self.stopping_at is None:
            self.died = [n for n, p in self.procs.items() if p.poll() is not None]
            if now >= self.deadline or self.signalled() or self.died:
                self.stopping_at = now
                for name, proc in self.procs.items():
                    if "rtc_executor" in name and proc.poll() is None:
                        proc.send_signal(signal.SIGINT)
            return False
        return now - self.stopping_at >= IN_FLIGHT_GRACE_S


def record_env(with_fleet: bool, environ: Mapping[str, str]) -> dict[str, str]:
    """The environment of a recording: loopback discovery unless set, and the domain.

    A fleet that runs already is recorded on the environment's domain (ROS' default 0
    when unset); a fleet this command starts gets a private random one unless set.
    """
    if with_fleet:
        from xinfer_ros.cli.fleet import _loopback_env

        return _loopback_env(environ)
    env = dict(environ)
    env.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    env.setdefault("ROS_DOMAIN_ID", "0")
    return env


class _Silence:
    """True once ``timeout_s`` passed without a single recorded message."""

    def __init__(self, recorder: Recorder, timeout_s: float) -> None:
        self.recorder = recorder
        self.until = time.monotonic() + timeout_s
        self.timed_out = False

    def __call__(self) -> bool:
        if self.recorder.message_count == 0 and time.monotonic() >= self.until:
            self.timed_out = True
        return self.timed_out


def _start_fleet(args: argparse.Namespace, env: dict[str, str],
                 logs: Path) -> dict[str, subprocess.Popen]:
    from xinfer_ros.cli.fleet import _spawn

    plan = build_fleet_plan(args.robots, backend=args.backend, model=args.model,
                            model_path=args.model_path, policy=args.policy,
                            workload=args.workload, config=args.config,
                            seed=args.seed)
    return {f"{spec.namespace.strip('/') or 'server'}/{spec.name}": _spawn(spec, logs, env)
            for spec in plan}


def record(args: argparse.Namespace) -> int:
    """Record as ``args`` says; return the exit status."""
    from xinfer_ros.nodes.runtime import ros_session

    try:
        robots = parse_robots(args.robots)
    except PlanError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if not (args.topic_timeout >= 0 and args.topic_timeout < float("inf")):
        print(f"error: --topic-timeout must be >= 0, got {args.topic_timeout}", file=sys.stderr)
        return 2
    output = args.output or _default_output()
    output.parent.mkdir(parents=True, exist_ok=True)
    env = record_env(args.with_fleet, os.environ)
    os.environ.update({k: env[k] for k in ("ROS_AUTOMATIC_DISCOVERY_RANGE", "ROS_DOMAIN_ID")})

    with ros_session() as flag:
        return _record(args, robots, output, env, flag)


def _record(args: argparse.Namespace, robots: list[str], output: Path, env: dict[str, str],
            flag: StopFlag) -> int:
    from xinfer_ros.cli.fleet import _stop
    from xinfer_ros.nodes.recorder import make_recorder, run_recorder, wait_for_server

    procs: dict[str, subprocess.Popen] = {}
    stopper: _FleetStopper | None = None
    recorder = None
    try:
        if args.with_fleet:
            logs = args.logs or Path(tempfile.mkdtemp(prefix="record_fleet_"))
            logs.mkdir(parents=True, exist_ok=True)
            try:
                procs = _start_fleet(args, env, logs)
            except PlanError as exc:
                print(f"error: {exc}", file=sys.stderr)
                return 2
            print(f"fleet started ({len(procs)} nodes); logs in {logs}; waiting for the server")
            if not wait_for_server(args.ready_timeout,
                                   lambda: all(p.poll() is None for p in procs.values()),
                                   lambda: flag.signal is not None):
                print(f"error: the server did not come up within {args.ready_timeout:g} s; "
                      f"see {logs}", file=sys.stderr)
                return 1
        try:
            recorder = make_recorder(robots, output, cameras=args.cameras,
                                     storage=args.storage, bag_version=args.bag_version,
                                     distro=args.distro, record_images=not args.no_images)
        except (ValueError, OSError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        print(f"xinfer-record: {len(robots)} robots {robots} -> {output} ({args.storage}); "
              f"ROS_DOMAIN_ID={env['ROS_DOMAIN_ID']} (loopback only)"
              + (f"; {args.duration:g} s" if args.duration > 0 else "; Ctrl-C to stop"))
        deadline = time.monotonic() + (args.duration if args.duration > 0 else float("inf"))

        def until_deadline() -> bool:
            return flag.signal is not None or time.monotonic() >= deadline

        stop: Callable[[], bool] = until_deadline
        if procs:
            stopper = _FleetStopper(procs, recorder, args.duration if args.duration > 0
                                    else float("inf"), args.ready_timeout,
                                    lambda: flag.signal is not None)
            stop = stopper
        silence = _Silence(recorder, args.topic_timeout + (args.ready_timeout if procs else 0.0)
                           if args.topic_timeout > 0 else float("inf"))
        run_recorder(recorder, lambda: silence() or stop())
    finally:
        _stop(list(procs.values()))
        if recorder is not None:
            recorder.destroy_node()
    if recorder is None:
        return 2
    if recorder.message_count == 0:  # timed out, or ended (duration, signal) before
        when = (f"within {args.topic_timeout:g} s" if silence.timed_out
                else "before the recording ended")
        print(f"error: no message on any recorded topic of robots {robots} {when} "
              f"(ROS_DOMAIN_ID={env['ROS_DOMAIN_ID']}, discovery "
              f"{env['ROS_AUTOMATIC_DISCOVERY_RANGE']}); is the fleet running on this "
              f"domain? The empty bag is {output}", file=sys.stderr)
        return 1
    print(f"bag: {output} ({recorder.message_count} messages)")
    for topic, count in sorted(recorder.counts.items()):
        print(f"  {topic:<40}{count:>8}")
    if stopper is not None and stopper.died:
        print(f"error: node(s) exited early: {', '.join(stopper.died)}", file=sys.stderr)
        return 1
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``xinfer-record``."""
    return record(build_parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
