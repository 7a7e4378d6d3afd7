"""``xinfer-replay BAG``: replay a recorded fleet bag against a server; report regressions.

Plays the bag's robot inputs (camera frames, joint states, budgets, policy requests)
into a server, keeping the recorded timing (``--rate`` scales it), open loop (requests
at their recorded times, unchanged) or closed loop (``--mode closed``: Eq. 1,
``s_{j+1} = max(s_j + T_E, r_j)`` against the new server, recorded budgets). By default
it starts a server like ``xinfer-fleet`` does, serving the bag's robots; ``--running``
uses one that is already up. It collects the new chunks and writes a regression report
(JSON, a table, a figure, optionally JUnit XML): per robot attainment, P50/P99 before
and after, action differences against the recorded chunks, status counts.

A plain robot bag (``ros2 bag record``: other topic names, no requests) is replayed
through a topic mapping (``--robot/--camera/--state`` flags or ``--map``), closed loop
with made-up requests. ``--save-golden`` keeps a run's requests and answers as a golden
bag; ``--golden`` replays those requests and compares with those answers
(docs/BAGS.md).

Exit status: 0 all checks passed; 1 a threshold was crossed (``--max-attainment-drop``,
``--max-action-rms``, ...); 2 the bag is unusable or the arguments are wrong; 3 the
server did not come up, died, or nothing was answered.

DDS stays on loopback: ``ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST`` is set unless the
caller set it, and a random ``ROS_DOMAIN_ID`` is chosen unless one is set.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from xinfer_ros.core.constants import SEND_PERIOD
from xinfer_ros.errors import XInferRosError
from xinfer_ros.fleet.plan import BACKENDS, NodeParams, PlanError, build_fleet_plan
from xinfer_ros.sim.workloads import WORKLOADS

if TYPE_CHECKING:
    from xinfer_ros.bags.mapping import TopicMapping
    from xinfer_ros.bags.report import ReplayReport, Thresholds
    from xinfer_ros.bags.scan import RecordedRun
    from xinfer_ros.nodes.bag_player import PlayResult

__all__ = ["EXIT_BAD_INPUT", "EXIT_REGRESSION", "EXIT_SERVER", "build_parser", "main", "replay"]

#: Workloads whose budget sequences a plain bag's robots can follow: one simulated robot
#: per robot (bursty adds robots of its own; custom needs budgets of its own).
BUDGET_PATTERNS = tuple(w for w in WORKLOADS if w not in ("bursty", "custom"))

EXIT_REGRESSION = 1
EXIT_BAD_INPUT = 2
EXIT_SERVER = 3


class _MappingFlag(argparse.Action):
    """Keeps ``--robot/--camera/--state/--budget-topic`` in command-line order."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: str | Sequence[object] | None,
                 option_string: str | None = None) -> None:
        items = list(getattr(namespace, "mapping_flags", None) or [])
        items.append((self.dest, str(values)))
        namespace.mapping_flags = items


def _optional_float(text: str) -> float | None:
    return None if text.lower() in ("none", "off", "") else float(text)


def build_parser() -> argparse.ArgumentParser:
    """The command-line parser."""
    p = argparse.ArgumentParser(prog="xinfer-replay", description=__doc__.splitlines()[0])
    p.add_argument("bag", type=Path, help="rosbag2 directory (MCAP or sqlite3) or .mcap file")
    p.add_argument("--mode", choices=("open", "closed"), default=None,
                   help="open: recorded request times; closed: Eq. 1 against the new server "
                        "(default: open for a fleet bag, closed for a plain robot bag)")
    p.add_argument("--rate", type=float, default=1.0, help="playback speed factor")
    p.add_argument("--period", type=float, default=SEND_PERIOD,
                   help="closed loop: minimum request period T_E (s)")
    robots = p.add_argument_group(
        "plain robot bags (no policy_request topics): which topics are which robot's; "
        "requests are made up closed loop at Eq. 1 cadence")
    robots.add_argument("--map", type=Path, default=None, metavar="YAML",
                        help="topic mapping file (robots: {name: {cameras, state, budget}})")
    robots.add_argument("--robot", action=_MappingFlag, metavar="NAME",
                        help="start a robot; the camera/state/budget flags after it are its")
    robots.add_argument("--camera", action=_MappingFlag, metavar="TOPIC",
                        help="the robot's next camera (sensor_msgs/Image or CompressedImage)")
    robots.add_argument("--state", action=_MappingFlag, metavar="TOPIC",
                        help="the robot's sensor_msgs/JointState topic")
    robots.add_argument("--budget-topic", action=_MappingFlag, dest="budget", metavar="TOPIC",
                        help="the robot's recorded budget (xinfer_ros/ResponseBudget, or a "
                             "std_msgs/Float64 or Float32 in ms)")
    robots.add_argument("--budget-ms", type=float, default=None,
                        help="budget of made-up requests where no budget topic is mapped")
    robots.add_argument("--budget-pattern", choices=BUDGET_PATTERNS, default=None,
                        help="made-up requests follow this workload's budget sequence "
                             "(one robot of it per mapped robot)")
    robots.add_argument("--instruction", default="", help="instruction of made-up requests")
    srv = p.add_argument_group("server")
    srv.add_argument("--running", action="store_true",
                     help="replay into a server that is already running (do not start one)")
    srv.add_argument("--backend", choices=BACKENDS, default=None, help="model backend")
    srv.add_argument("--model", default=None, help="model preset")
    srv.add_argument("--model-path", default=None, metavar="DIR",
                     help="checkpoint directory of the model (π0: either layout)")
    srv.add_argument("--policy", default=None, help="scheduling policy")
    srv.add_argument("--device", default=None, help="torch device")
    srv.add_argument("--config", type=Path, default=None, help="server parameter file")
    srv.add_argument("--server-timeout", type=float, default=120.0,
                     help="longest wait for the server to connect (s)")
    srv.add_argument("--probe-timeout", type=float, default=15.0,
                     help="longest wait for probe requests to prove frames reach the server (s)")
    tim = p.add_argument_group("timing")
    tim.add_argument("--request-timeout", type=float, default=1.0,
                     help="closed loop: abandon a request unanswered this long (s)")
    tim.add_argument("--response-timeout", type=float, default=3.0,
                     help="after the last message, wait this long for answers (s)")
    tim.add_argument("--warmup", type=float, default=0.0,
                     help="do not measure requests in the first WARMUP s of the bag")
    tim.add_argument("--drain", type=float, default=0.5,
                     help="do not measure requests in the last DRAIN s of the bag")
    tim.add_argument("--max-clock-skew-ms", type=float, default=100.0,
                     help="warn when a robot's clock (its header stamps) and the recorder's "
                          "(log times) differ by more than this (ms)")
    thr = p.add_argument_group("thresholds (exit 1 when crossed; 'none' disables)")
    thr.add_argument("--max-attainment-drop", type=_optional_float, default=0.02,
                     help="largest allowed attainment fall, fraction (default 0.02)")
    thr.add_argument("--max-p50-increase-ms", type=_optional_float, default=None)
    thr.add_argument("--max-p99-increase-ms", type=_optional_float, default=None)
    thr.add_argument("--max-action-rms", type=_optional_float, default=None,
                     help="largest allowed RMS action difference (comparable pairs)")
    thr.add_argument("--max-action-abs", type=_optional_float, default=None,
                     help="largest allowed absolute action difference")
    thr.add_argument("--require-identical", action="store_true",
                     help="every comparable chunk must reproduce the recorded actions exactly")
    thr.add_argument("--max-obs-mismatch", type=_optional_float, default=None,
                     help="largest allowed fraction of chunks that used other observations")
    thr.add_argument("--max-unanswered", type=_optional_float, default=None,
                     help="largest allowed fraction of replayed requests left unanswered")
    gold = p.add_argument_group("golden actions")
    gold.add_argument("--save-golden", type=Path, default=None, metavar="DIR",
                      help="write this run's requests and answers as a golden bag (MCAP)")
    gold.add_argument("--golden", type=Path, default=None, metavar="DIR",
                      help="send a golden bag's requests at their times and compare the "
                           "answers with its answers (the thresholds apply as to a fleet bag)")
    p.add_argument("--json", type=Path, default=None,
                   help="report path (default OUT/replay_report.json)")
    p.add_argument("--junit", type=Path, default=None, metavar="FILE",
                   help="also write the checks as JUnit XML (one case per robot and check)")
    p.add_argument("--out", type=Path, default=Path("out/replay"),
                   help="directory for the report and the server log")
    return p


def _thresholds(args: argparse.Namespace) -> Thresholds:
    from xinfer_ros.bags.report import Thresholds

    return Thresholds(
        max_attainment_drop=args.max_attainment_drop,
        max_p50_increase_ms=args.max_p50_increase_ms,
        max_p99_increase_ms=args.max_p99_increase_ms,
        max_action_rms=args.max_action_rms, max_action_abs=args.max_action_abs,
        require_identical=args.require_identical, max_obs_mismatch=args.max_obs_mismatch,
        max_unanswered=args.max_unanswered)


def _check_args(args: argparse.Namespace) -> str | None:
    if not (math.isfinite(args.rate) and args.rate > 0):
        return f"--rate must be > 0, got {args.rate}"
    for name in ("period", "request_timeout", "response_timeout", "warmup", "drain",
                 "server_timeout", "probe_timeout", "max_clock_skew_ms"):
        value = getattr(args, name)
        if not (math.isfinite(value) and value >= 0):
            return f"--{name.replace('_', '-')} must be >= 0, got {value}"
    if args.save_golden is not None and args.save_golden.exists():
        return f"--save-golden {args.save_golden} exists; a golden bag is never overwritten"
    if args.golden is not None and not args.golden.exists():
        return f"--golden {args.golden} does not exist"
    return None


def _start_server(args: argparse.Namespace, robots: list[str], env: dict[str, str],
                  workdir: Path, sensors: NodeParams) -> subprocess.Popen[bytes]:
    from xinfer_ros.cli.fleet import _spawn

    spec = build_fleet_plan(robots, backend=args.backend, model=args.model,
                            model_path=args.model_path, policy=args.policy,
                            config=args.config)[0]
    if args.device:
        spec.parameters["device"] = args.device
    spec.parameters.update(sensors)
    return _spawn(spec, workdir, env)


def _mapping(args: argparse.Namespace) -> TopicMapping | None:
    """The topic mapping of a plain robot bag, or None for a fleet bag.

    Raises:
        MappingError: Both a file and flags, or a malformed mapping.
    """
    from xinfer_ros.bags.mapping import MappingError, TopicMapping

    flags = getattr(args, "mapping_flags", None) or []
    if args.map is not None and flags:
        raise MappingError("give the mapping as --map or as --robot/--camera/--state flags, "
                           "not both")
    if args.map is not None:
        return TopicMapping.from_yaml(args.map)
    return TopicMapping.from_flags(flags) if flags else None


def _check_mapped(args: argparse.Namespace, mapping: TopicMapping | None) -> str | None:
    """Why a plain-bag replay cannot run as asked, or None."""
    if mapping is None:
        for name in ("budget_ms", "budget_pattern"):
            if getattr(args, name) is not None:
                return f"--{name.replace('_', '-')} applies to a plain robot bag (with a mapping)"
        return None
    if args.golden is not None:
        if args.mode == "closed":
            return "--golden replays the golden requests at their times: --mode open only"
        return None  # the golden bag's requests carry times and budgets
    if args.mode == "open":
        return "a plain robot bag has no recorded request times: it replays --mode closed"
    if args.budget_ms is not None and not (math.isfinite(args.budget_ms) and args.budget_ms > 0):
        return f"--budget-ms must be > 0, got {args.budget_ms}"
    unbudgeted = [r.name for r in mapping.robots if not r.budget]
    if unbudgeted and args.budget_ms is None and args.budget_pattern is None:
        return (f"robots {unbudgeted} have no budget topic: give --budget-ms or "
                "--budget-pattern")
    return None


def _clock_warnings(run: RecordedRun, limit_ms: float) -> list[str]:
    """A warning per robot whose clock is further than ``limit_ms`` from the recorder's."""
    notes = []
    for name, track in sorted(run.robots.items()):
        offset_ms = track.clock_offset_ns / 1e6
        if abs(offset_ms) > limit_ms:
            notes.append(f"{name}: header stamps are {offset_ms:+.1f} ms from the recorder's "
                         f"log times (limit {limit_ms:g} ms): clock skew between "
                         "robot and recorder; made-up request stamps follow the robot's clock")
    return notes


def _sensor_params(run: RecordedRun, mapping: TopicMapping | None) -> NodeParams:
    """The server's camera parameters for a mapped bag (count and transport per camera).

    Raises:
        MappingError: Robots with different camera counts or transports per camera.
    """
    from xinfer_ros.bags.mapping import MappingError

    layouts: dict[str, tuple[str, ...]] = {}
    for name in run.robots:
        cameras = sorted((t.camera, t.compressed) for t in run.topics.values()
                         if t.robot == name and t.camera >= 0)
        layouts[name] = tuple("compressed" if c else "raw" for _, c in cameras)
    if mapping is None and not any("compressed" in layout for layout in layouts.values()):
        return {}  # raw fleet cameras: the server's own configuration
    if len(set(layouts.values())) > 1:
        raise MappingError("the server takes one camera layout for all robots; the bag's "
                           f"robots have {layouts}")
    (layout,) = set(layouts.values())
    return {"cameras": len(layout), "image_transports": list(layout)}


def _server_info(args: argparse.Namespace) -> dict[str, object]:
    if args.running:
        return {"server": "running"}
    try:
        params = build_fleet_plan(1, backend=args.backend, model=args.model,
                                  model_path=args.model_path, policy=args.policy,
                                  config=args.config)[0].parameters
    except PlanError:
        return {"server": "started"}
    return {"server": "started", "backend": params.get("backend"), "model": params.get("model"),
            "policy": params.get("policy")}


def _play(args: argparse.Namespace, run: RecordedRun, server: subprocess.Popen[bytes] | None,
          stop: Callable[[], bool]) -> tuple[PlayResult, str | None]:
    """Connect to the server and replay; return the result and an error, if any."""
    from xinfer_ros.nodes.bag_player import PlayConfig, play_bag

    config = PlayConfig(mode=args.mode, rate=args.rate, period_s=args.period,
                        request_timeout_s=args.request_timeout,
                        response_timeout_s=args.response_timeout, budget_ms=args.budget_ms,
                        budget_pattern=args.budget_pattern, instruction=args.instruction)
    return play_bag(run, config, server_alive=lambda: server is None or server.poll() is None,
                    stop=stop, server_timeout=args.server_timeout,
                    probe_timeout=args.probe_timeout)


def _json_safe(value: object) -> object:
    # NaN and infinities (no samples) become null so that strict JSON readers accept
    # the report; numpy scalars become plain numbers.
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, (int, float)):
        number: object = value
    elif callable(item := getattr(value, "item", None)):
        number = item()
    else:
        return str(value)
    return None if isinstance(number, float) and not math.isfinite(number) else number


def _write_report(report: ReplayReport, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(_json_safe(report.to_dict()), indent=2, allow_nan=False))


class _RefusedError(XInferRosError):
    """The replay cannot run as asked; the message says why (exit 2)."""


def _prepare(args: argparse.Namespace) -> tuple[RecordedRun, NodeParams]:
    """The scanned bag (with its golden baseline) and the server's camera parameters.

    Raises:
        _RefusedError: Bad arguments, an unusable bag or mapping.
    """
    from xinfer_ros.bags.golden import apply_golden
    from xinfer_ros.bags.reader import BagError
    from xinfer_ros.bags.scan import scan_bag

    if error := _check_args(args):
        raise _RefusedError(error)
    try:
        mapping = _mapping(args)
        if error := _check_mapped(args, mapping):
            raise _RefusedError(error)
        args.mode = args.mode or ("closed" if mapping is not None and args.golden is None
                                  else "open")
        run = scan_bag(args.bag, mapping=mapping)
        sensors = _sensor_params(run, mapping)
        if args.golden is not None:
            run.warnings += apply_golden(run, args.golden)
        run.warnings += _clock_warnings(run, args.max_clock_skew_ms)
    except (BagError, ValueError) as exc:
        raise _RefusedError(str(exc)) from exc
    return run, sensors


def _serve_and_play(args: argparse.Namespace, run: RecordedRun,
                    sensors: NodeParams) -> tuple[PlayResult, str | None, bool, Path]:
    """Start the server (unless ``--running``) and replay into it.

    Returns:
        The player's result, an error text or None, whether the user interrupted, and
        the directory of the server's log.

    Raises:
        _RefusedError: The server's plan is invalid.
    """
    from xinfer_ros.cli.fleet import _loopback_env, _stop
    from xinfer_ros.nodes.runtime import ros_session
    from xinfer_ros.nodes.shm_transport import use_large_segment

    robots = sorted(run.robots)
    if args.running and "ROS_DOMAIN_ID" not in os.environ:
        print("warning: --running without ROS_DOMAIN_ID: a random domain is chosen, where "
              "no server runs; set the server's ROS_DOMAIN_ID", file=sys.stderr)
    env = _loopback_env()
    os.environ.update({k: env[k] for k in ("ROS_AUTOMATIC_DISCOVERY_RANGE", "ROS_DOMAIN_ID")})
    args.out.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="replay_", dir=args.out))
    print(f"xinfer-replay: {args.bag} ({run.source.storage}, {run.duration_s:.1f} s, robots "
          f"{robots}); ROS_DOMAIN_ID={env['ROS_DOMAIN_ID']} (loopback only); logs in {workdir}")
    # This process publishes every recorded frame; the server (env above) keeps its own
    # transport settings.
    print(use_large_segment(workdir))
    server = None
    with ros_session() as flag:
        try:
            if not args.running:
                try:
                    server = _start_server(args, robots, env, workdir, sensors)
                except PlanError as exc:
                    raise _RefusedError(str(exc)) from exc
            result, error = _play(args, run, server, lambda: flag.signal is not None)
        finally:
            if server is not None:
                _stop([server])
    return result, error, flag.signal is not None, workdir


def _write_outputs(args: argparse.Namespace, run: RecordedRun, result: PlayResult,
                   report: ReplayReport) -> None:
    """The JSON report, the figure, the JUnit file and the golden bag, as asked.

    Raises:
        _RefusedError: The golden bag could not be written.
    """
    from xinfer_ros.bags.figures import write_replay_figure
    from xinfer_ros.bags.golden import write_golden
    from xinfer_ros.bags.junit import write_junit
    from xinfer_ros.bags.reader import BagError

    json_path = args.json or args.out / "replay_report.json"
    figure = json_path.with_suffix(".png")
    report.figure = str(figure)
    _write_report(report, json_path)
    print(f"report: {json_path}")
    try:  # the figure is a convenience: never at the cost of the report
        write_replay_figure(run, result, figure)
        print(f"figure: {figure}")
    except (ValueError, OSError, RuntimeError, MemoryError) as exc:
        print(f"warning: figure not written: {exc}", file=sys.stderr)
    if args.junit is not None:
        write_junit(report, args.junit)
        print(f"JUnit: {args.junit}")
    if args.save_golden is not None:
        if report.error or result.stopped or report.total.after.responses == 0:
            print("warning: the replay did not run to its end; no golden bag written",
                  file=sys.stderr)
            return
        try:
            saved = write_golden(args.save_golden, run, result)
        except BagError as exc:
            raise _RefusedError(f"golden bag not written: {exc}") from exc
        print(f"golden bag: {args.save_golden} ({saved} answers)")


def replay(args: argparse.Namespace) -> int:
    """Replay as ``args`` says; return the exit status."""
    from xinfer_ros.bags.report import build_report, format_report

    try:
        run, sensors = _prepare(args)
        for warning in run.warnings:
            print(f"warning: {warning}", file=sys.stderr)
        result, error, interrupted, workdir = _serve_and_play(args, run, sensors)
        info = {"mode": args.mode, "rate": args.rate, **_server_info(args),
                "golden": str(args.golden) if args.golden else None}
        report = build_report(run, result, _thresholds(args), warmup_s=args.warmup,
                              drain_s=args.drain, info=info)
        report.error = error
        print(format_report(report))
        _write_outputs(args, run, result, report)
    except _RefusedError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if error or report.total.after.responses == 0:
        print(f"error: {error or 'no answers from the server'}; see {workdir}", file=sys.stderr)
        return EXIT_SERVER
    if interrupted:
        print("interrupted", file=sys.stderr)
        return EXIT_SERVER
    return 0 if report.passed else EXIT_REGRESSION


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``xinfer-replay``."""
    return replay(build_parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
