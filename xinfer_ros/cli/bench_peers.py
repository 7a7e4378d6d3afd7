"""``xinfer-bench peers``: xinfer side by side with the plain servers labs run today.

Arms, each a server process on 127.0.0.1 serving the same π0 checkpoint (``pi0-tiny``
by default) with the same preprocessing and transport (openpi WebSocket,
msgpack-numpy), so that the serving loop is the difference:

``openpi``
    openpi's ``WebsocketPolicyServer`` loop: ``sample_actions`` synchronously inside
    the connection handler, one request at a time (:mod:`xinfer_ros.openpi.peers`).
``lerobot``
    LeRobot's policy server loop: a one-slot observation queue, newest wins, one
    inference thread (superseded observations are refused at once).
``xinfer``
    ``xinfer-serve --openpi`` as shipped: the inference server's parameter file
    (``config/fleet.yaml``: torch backend, slots, Action processes, rate table, phase
    spreading), read by :func:`xinfer_ros.cli.serve.server_params` and built by
    :func:`xinfer_ros.engine.from_params.build_engine`.

One closed-loop load generator drives every arm: N robots (:class:`~xinfer_ros.core.
clients.Robot`), each with one request in flight and its next send at ``max(s +
T_E, r)`` (Eq. 1), budgets alternating per request between the classes of
``--budgets``, robots staggered over one period. The arms run interleaved in blocks
(every client count, every arm, in a rotated order each round), so load from other
work on the host falls on all arms alike; every figure is the median over
``--rounds``. Per budget class: attainment, answers/s (chunks), on-time/s, and the
P50/P99 latency of every answer a robot waited for, refusals (shed, rejected,
superseded) included, with the chunk-only percentiles beside.

Loopback only; bounded in count (``--robots``) and in time (each block ends after
``--duration`` s plus at most one reply timeout).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from xinfer_ros.core.clients import Robot, RobotSpec
from xinfer_ros.core.constants import SEND_PERIOD
from xinfer_ros.core.metrics import ResponseRecord, WindowMetrics, summarize
from xinfer_ros.core.timing import MS_PER_S
from xinfer_ros.fleet.plan import NodeParams
from xinfer_ros.sim.workloads import CyclicBudgets

__all__ = ["ARMS", "ArmServer", "BlockResult", "add_arguments", "block_metrics", "run",
           "run_block"]

#: Arm names, in the order of the tables (the default runs the first three).
ARMS: tuple[str, ...] = ("openpi", "lerobot", "xinfer", "xinfer-serial", "xinfer-lazy",
                         "xinfer-lazy-device")
#: xinfer arms that run the shipped parameters with these ``torch`` ones changed.
#: ``xinfer-serial``: one unit per stage and no Action worker processes, xinfer's
#: scheduler on a serial pipeline, the lower bound of its overhead on this CPU.
#: ``xinfer-lazy`` / ``xinfer-lazy-device``: ``lazy_slots`` stage / device, spare
#: slots only for requests whose slack cannot wait.
ARM_TORCH: dict[str, dict[str, object]] = {
    "xinfer-serial": {"slots": [1, 1, 1], "action_processes": 0},
    "xinfer-lazy": {"lazy_slots": "stage"},
    "xinfer-lazy-device": {"lazy_slots": "device"},
}
#: Longest wait for one reply before a robot gives up (its request counts unanswered).
REPLY_TIMEOUT_S = 10.0
#: Longest wait for a server to load its model and bind its port.
START_TIMEOUT_S = 180.0
#: Requests each arm answers before the first block (first-call costs, allocator).
WARM_REQUESTS = 3


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the peers benchmark's flags."""
    parser.add_argument("--arms", nargs="+", choices=ARMS, default=list(ARMS[:3]),
                        help="arms to run (xinfer-lazy, xinfer-lazy-device: the shipped "
                             "parameters with torch lazy_slots stage, device; xinfer-serial: "
                             "with torch slots 1,1,1 and no Action worker processes)")
    parser.add_argument("--robots", type=int, nargs="+", default=[1, 2, 4, 8],
                        help="client counts")
    parser.add_argument("--budgets", type=float, nargs="+", default=[150.0, 400.0],
                        metavar="MS", help="budget classes, alternating per request")
    parser.add_argument("--duration", type=float, default=7.0,
                        help="seconds per block (sends stop then)")
    parser.add_argument("--warmup", type=float, default=1.5,
                        help="unmeasured seconds at the start of each block")
    parser.add_argument("--rounds", type=int, default=3,
                        help="interleaved rounds; figures are medians over them")
    parser.add_argument("--params-file", default=None, metavar="YAML",
                        help="xinfer arm: the server parameter file (default: the shipped "
                             "config/fleet.yaml); its model is served by every arm")
    parser.add_argument("--paired", type=int, default=0, metavar="K",
                        help="after the blocks: K rounds of one request per arm, one "
                             "at a time in a rotated order (N = 1, budget 400 ms), and the "
                             "median ratio of each arm's latency to the first arm's in the "
                             "same round: drift of the machine cancels")
    parser.add_argument("--quick", action="store_true",
                        help="smoke test: N = 1 and 2, one 3 s round")
    parser.add_argument("--json", type=Path, default=None, help="write every figure here")
    parser.add_argument("--figure", type=Path, default=None, help="write a PNG figure here")


# -- servers ------------------------------------------------------------------------------
def _xinfer_params(params_file: str | None) -> NodeParams:
    from xinfer_ros.cli.serve import build_parser, server_params

    argv = ["--openpi"] + (["--params-file", params_file] if params_file else [])
    return server_params(build_parser().parse_args(argv))


def arm_params_file(arm: str, params_file: str | None, workdir: Path) -> str:
    """The parameter file of an :data:`ARM_TORCH` arm, written into ``workdir``."""
    import yaml

    from xinfer_ros.fleet.plan import default_config

    source = Path(params_file) if params_file else default_config()
    data = yaml.safe_load(source.read_text())
    torch_params = data["inference_server"]["ros__parameters"].setdefault("torch", {})
    torch_params.update(ARM_TORCH[arm])
    path = workdir / f"{arm.replace('-', '_')}.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def _command(arm: str, params: NodeParams, params_file: str | None) -> list[str]:
    if arm.startswith("xinfer"):
        cmd = [sys.executable, "-m", "xinfer_ros.cli.serve", "--openpi", "--host",
               "127.0.0.1", "--port", "0", "--layout", "aloha", "--log-level", "WARNING"]
        return cmd + (["--params-file", params_file] if params_file else [])
    cmd = [sys.executable, "-m", "xinfer_ros.openpi.peers", "--loop", arm, "--port", "0",
           "--model", params["model"], "--layout", "aloha"]
    return cmd + (["--model-path", params["model_path"]] if params["model_path"] else [])


@dataclass
class ArmServer:
    """One arm's server process and its port."""

    arm: str
    proc: subprocess.Popen[str]
    port: int = 0

    def uri(self, robot: int) -> str:
        """The WebSocket URI a robot connects to (its id in the path)."""
        return f"ws://127.0.0.1:{self.port}/{self.arm}-{robot}"

    def wait_ready(self, deadline: float) -> None:
        """Read the port the server prints once it is bound.

        Raises:
            RuntimeError: When it exits or stays silent past ``deadline``.
        """
        assert self.proc.stdout is not None
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line and self.proc.poll() is not None:
                break
            if "ws://127.0.0.1:" in line:
                self.port = int(line.split("ws://127.0.0.1:")[1].split()[0])
                return
        raise RuntimeError(f"{self.arm} arm server did not start (exit code "
                           f"{self.proc.poll()})")

    def stop(self) -> None:
        """Terminate the process (and its Action workers, which follow their parent)."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)


def start_servers(arms: Sequence[str], params: NodeParams, params_file: str | None,
                  workdir: Path) -> dict[str, ArmServer]:
    """Start every arm's server at once (they load in parallel) and wait for each."""
    servers: dict[str, ArmServer] = {}
    try:
        for arm in arms:
            file = arm_params_file(arm, params_file, workdir) if arm in ARM_TORCH \
                else params_file
            proc = subprocess.Popen(_command(arm, params, file), stdout=subprocess.PIPE,
                                    stderr=subprocess.DEVNULL, text=True, env=dict(os.environ))
            servers[arm] = ArmServer(arm, proc)
        deadline = time.monotonic() + START_TIMEOUT_S
        for server in servers.values():
            server.wait_ready(deadline)
    except BaseException:
        for server in servers.values():
            server.stop()
        raise
    return servers


# -- the load generator -----------------------------------------------------------------
def observation(params: NodeParams, robot: int) -> dict[str, object]:
    """A robot's ALOHA-layout observation at the model's camera sizes (no resize)."""
    from xinfer_ros.model.presets import model_io

    io = model_io(params["model"], params["model_path"] or None)
    rng = np.random.default_rng(robot)
    names = ("cam_high", "cam_left_wrist", "cam_right_wrist")
    return {"images": {n: rng.integers(0, 256, (c.height, c.width, 3), dtype=np.uint8)
                       for n, c in zip(names, io.cameras, strict=False)},
            "state": rng.uniform(-0.5, 0.5, 14),
            "prompt": "pick up the parcel and place it in the bin"}


@dataclass
class BlockResult:
    """What one block's robots saw: records and how each answered request ended."""

    records: list[ResponseRecord] = field(default_factory=list)
    #: Per answered request: ``ok`` or the refusal's kind (``shed``, ``rejected``...).
    outcomes: dict[str, int] = field(default_factory=dict)
    #: Robots add their records under it when they stop.
    lock: threading.Lock = field(default_factory=threading.Lock)


def _drive(uri: str, spec: RobotSpec, obs: dict[str, object], span: tuple[float, float],
           out: BlockResult) -> None:
    """One closed-loop robot from ``t0`` until ``duration`` s later (``span``)."""
    t0, duration = span
    from xinfer_ros.openpi.client import OpenPIClient, ServerError

    robot = Robot(spec, period=SEND_PERIOD)
    outcomes: dict[str, int] = {}
    message = dict(obs)
    try:
        client = OpenPIClient(uri, timeout_s=REPLY_TIMEOUT_S)
    except (OSError, TimeoutError):
        return
    try:
        t_next = spec.start
        while True:
            wait = t_next - (time.monotonic() - t0)
            if wait > 0:
                time.sleep(wait)
            t_send = time.monotonic() - t0
            if t_send >= duration:
                break
            budget = robot.send(t_send)
            message["xinfer/budget_ms"] = budget * MS_PER_S
            try:
                client.infer(message)
                kind = "ok"
            except ServerError as exc:
                kind = str(exc).split(":", 1)[0].strip() or "error"
            except Exception:  # a timeout or a closed connection: unanswered
                break
            t_next = robot.receive(time.monotonic() - t0, budget, ok=kind == "ok")
            outcomes[kind] = outcomes.get(kind, 0) + 1
    finally:
        robot.close()
        client.close()
        with out.lock:
            out.records.extend(robot.records)
            for k, v in outcomes.items():
                out.outcomes[k] = out.outcomes.get(k, 0) + v


def run_block(server: ArmServer, robots: int, duration: float, budgets_ms: Sequence[float],
              params: NodeParams) -> BlockResult:
    """Run ``robots`` closed-loop robots against one arm for ``duration`` seconds."""
    out = BlockResult()
    budgets = tuple(b / MS_PER_S for b in budgets_ms)
    t0 = time.monotonic() + 0.5  # connections open before the first send
    threads = []
    for i in range(robots):
        spec = RobotSpec(i, start=i * SEND_PERIOD / robots,
                         budgets=CyclicBudgets(budgets, phase_length=1, offset=i))
        th = threading.Thread(target=_drive, args=(server.uri(i), spec,
                                                   observation(params, i), (t0, duration),
                                                   out), daemon=True)
        threads.append(th)
        th.start()
    for th in threads:
        th.join(duration + REPLY_TIMEOUT_S + 10.0)
    return out


def block_metrics(result: BlockResult, warmup: float, duration: float,
                  budgets_ms: Sequence[float]) -> dict[str, dict[str, float]]:
    """Per budget class (and ``all``): the figures of one block's measured window."""
    window = (warmup, duration)
    classes: dict[str, list[ResponseRecord]] = {"all": result.records}
    for b in budgets_ms:
        classes[f"{b:g}"] = [r for r in result.records
                             if math.isclose(r.budget * MS_PER_S, b)]
    return {name: _figures(summarize(recs, window), recs, window)
            for name, recs in classes.items()}


def _figures(m: WindowMetrics, records: Sequence[ResponseRecord],
             window: tuple[float, float]) -> dict[str, float]:
    inside = [r for r in records if window[0] <= r.send_time < window[1]]
    return {"requests": m.requests, "attainment": m.attainment, "answers_s": m.throughput_rps,
            "on_time_s": m.goodput_rps,
            "refused": sum(1 for r in inside if r.response_time is not None and not r.ok),
            "unanswered": sum(1 for r in inside if r.response_time is None),
            "p50_ms": m.answer_p50_ms, "p99_ms": m.answer_p99_ms,
            "chunk_p50_ms": m.latency_p50_ms, "chunk_p99_ms": m.latency_p99_ms}


# -- paired single requests ---------------------------------------------------------------
#: Budget of the paired requests (ms): loose, so no arm refuses one.
PAIRED_BUDGET_MS = 400.0


def run_paired(servers: dict[str, ArmServer], rounds: int, params: NodeParams
               ) -> dict[str, list[float]]:
    """Latency (ms) of one request per arm per round, the arms' order rotated each round.

    Requests go one at a time, so each arm serves a lone request (N = 1) and consecutive
    arms see the machine within about a tenth of a second of each other.
    """
    from xinfer_ros.openpi.client import OpenPIClient

    arms = list(servers)
    obs = {**observation(params, 0), "xinfer/budget_ms": PAIRED_BUDGET_MS}
    clients = {arm: OpenPIClient(servers[arm].uri(0), timeout_s=REPLY_TIMEOUT_S) for arm in arms}
    latency: dict[str, list[float]] = {arm: [] for arm in arms}
    try:
        for k in range(rounds):
            for arm in arms[k % len(arms):] + arms[:k % len(arms)]:
                t = time.perf_counter()
                clients[arm].infer(obs)
                latency[arm].append((time.perf_counter() - t) * MS_PER_S)
                time.sleep(0.02)  # as a robot between a reply and its next send
    finally:
        for client in clients.values():
            client.close()
    return latency


def paired_table(latency: dict[str, list[float]]) -> dict[str, dict[str, float]]:
    """Per arm: median, P90 and the median / quartiles of its per-round ratio to the first arm."""
    base = np.asarray(next(iter(latency.values())))
    out = {}
    for arm, values in latency.items():
        v = np.asarray(values)
        ratio = v / base
        out[arm] = {"p50_ms": float(np.median(v)), "p90_ms": float(np.percentile(v, 90)),
                    "ratio_median": float(np.median(ratio)),
                    "ratio_q25": float(np.percentile(ratio, 25)),
                    "ratio_q75": float(np.percentile(ratio, 75))}
    return out


# -- the run --------------------------------------------------------------------------------
def _warm(server: ArmServer, params: NodeParams) -> None:
    from xinfer_ros.openpi.client import OpenPIClient

    with OpenPIClient(server.uri(999), timeout_s=60.0) as client:
        obs = {**observation(params, 0), "xinfer/budget_ms": 400.0}
        for _ in range(WARM_REQUESTS):
            client.infer(obs)


def _median(values: list[float]) -> float:
    finite = [v for v in values if not math.isnan(v)]
    return float(np.median(finite)) if finite else math.nan


def aggregate(blocks: dict[tuple[str, int], list[dict[str, dict[str, float]]]]
              ) -> dict[str, dict[int, dict[str, dict[str, float]]]]:
    """Median over rounds of every figure: arm -> N -> class -> figure."""
    out: dict[str, dict[int, dict[str, dict[str, float]]]] = {}
    for (arm, n), rounds in blocks.items():
        classes = rounds[0].keys()
        out.setdefault(arm, {})[n] = {
            c: {k: _median([r[c][k] for r in rounds]) for k in rounds[0][c]}
            for c in classes}
    return out


def _print_table(table: dict[str, dict[int, dict[str, dict[str, float]]]],
                 robots: Sequence[int], classes: Sequence[str]) -> None:
    head = (f"{'N':>2} {'arm':<13} {'class':>5} {'attain':>7} {'ans/s':>6} {'ontime/s':>8} "
            f"{'refused':>7} {'P50':>6} {'P99':>6} {'chunkP50':>8} {'chunkP99':>8}")
    print(head)
    print("-" * len(head))
    for n in robots:
        for arm, by_n in table.items():
            for c in classes:
                f = by_n[n][c]
                print(f"{n:>2} {arm:<13} {c:>5} {f['attainment']:>7.3f} {f['answers_s']:>6.2f} "
                      f"{f['on_time_s']:>8.2f} {f['refused']:>7.0f} {f['p50_ms']:>6.0f} "
                      f"{f['p99_ms']:>6.0f} {f['chunk_p50_ms']:>8.0f} {f['chunk_p99_ms']:>8.0f}")


def _figure(table: dict[str, dict[int, dict[str, dict[str, float]]]], robots: Sequence[int],
            classes: Sequence[str], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    budget_classes = [c for c in classes if c != "all"]
    fig, axes = plt.subplots(1, len(budget_classes) + 2,
                             figsize=(4.2 * (len(budget_classes) + 2), 3.6))
    for arm, by_n in table.items():
        for ax, c in zip(axes, budget_classes, strict=False):
            ax.plot(robots, [by_n[n][c]["attainment"] for n in robots], "o-", label=arm)
            ax.set_title(f"attainment, {c} ms budget")
            ax.set_ylim(-0.02, 1.02)
        axes[-2].plot(robots, [by_n[n]["all"]["on_time_s"] for n in robots], "o-", label=arm)
        axes[-1].plot(robots, [by_n[n]["all"]["p50_ms"] for n in robots], "o-", label=arm)
        axes[-1].plot(robots, [by_n[n]["all"]["p99_ms"] for n in robots], "x--",
                      color=axes[-1].lines[-1].get_color())
    axes[-2].set_title("on-time answers/s (all classes)")
    axes[-1].set_title("latency of every answer, P50 (o) / P99 (x), ms")
    for ax in axes:
        ax.set_xlabel("robots")
        ax.set_xticks(list(robots))
        ax.grid(alpha=0.3)
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _print_paired(rounds: int, table: dict[str, dict[str, float]], params: NodeParams
                  ) -> dict[str, dict[str, float]]:
    """Print the paired table; returns it."""
    first = next(iter(table))
    print(f"\n{rounds} paired rounds, one {PAIRED_BUDGET_MS:g} ms request per arm at a "
          f"time; model {params['model']}; ratio: the arm's latency over {first}'s in the "
          "same round")
    print(f"{'arm':<20} {'P50 ms':>7} {'P90 ms':>7} {'ratio P50':>10} {'ratio IQR':>14}")
    for arm, row in table.items():
        print(f"{arm:<20} {row['p50_ms']:7.1f} {row['p90_ms']:7.1f} {row['ratio_median']:10.3f} "
              f"{row['ratio_q25']:6.3f}-{row['ratio_q75']:.3f}")
    return table


def _write_json(args: argparse.Namespace, *, params: NodeParams, started: float,
                table: dict[str, dict[int, dict[str, dict[str, float]]]],
                blocks: dict[tuple[str, int], list[dict[str, dict[str, float]]]],
                pairs: dict[str, dict[str, float]], paired: dict[str, list[float]]) -> None:
    args.json.write_text(json.dumps({
        "command": "xinfer-bench peers " + " ".join(sys.argv[2:]),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(started)),
        "host": {"cpus": os.cpu_count(), "platform": platform.platform()},
        "model": params["model"], "rounds": args.rounds, "duration_s": args.duration,
        "warmup_s": args.warmup, "budgets_ms": args.budgets, "period_s": SEND_PERIOD,
        "wall_s": time.time() - started,
        "table": {arm: {str(n): v for n, v in by_n.items()} for arm, by_n in table.items()},
        "blocks": [{"arm": a, "robots": n, "rounds": r} for (a, n), r in blocks.items()],
        "paired": {"rounds": args.paired, "table": pairs, "latency_ms": paired},
    }, indent=1, default=float))


def run(args: argparse.Namespace) -> int:
    """Start the arms, run the interleaved blocks, print and write the figures."""
    if args.quick:
        args.robots, args.rounds, args.duration, args.warmup = [1, 2], 1, 3.0, 0.5
    if not args.duration > args.warmup >= 0 or args.rounds < 1 or min(args.robots) < 1 \
            or args.paired < 0:
        print("xinfer-bench peers: need --duration > --warmup >= 0, --rounds >= 1, "
              "--robots >= 1, --paired >= 0", file=sys.stderr)
        return 2
    try:
        params = _xinfer_params(args.params_file)
    except ValueError as exc:
        print(f"xinfer-bench peers: {exc}", file=sys.stderr)
        return 2
    classes = ["all", *(f"{b:g}" for b in args.budgets)]
    started = time.time()
    workdir = tempfile.TemporaryDirectory(prefix="bench_peers_")
    servers = start_servers(args.arms, params, args.params_file, Path(workdir.name))
    blocks: dict[tuple[str, int], list[dict[str, dict[str, float]]]] = {}
    paired: dict[str, list[float]] = {}
    try:
        for server in servers.values():
            _warm(server, params)
        print(f"servers ready after {time.time() - started:.0f} s; "
              f"{args.rounds} round(s) x {len(args.robots)} N x {len(args.arms)} arms x "
              f"{args.duration:g} s", flush=True)
        for k in range(args.rounds):
            for n in args.robots:
                order = list(args.arms[k % len(args.arms):]) + list(args.arms[:k % len(args.arms)])
                for arm in order:
                    result = run_block(servers[arm], n, args.duration, args.budgets, params)
                    figures = block_metrics(result, args.warmup, args.duration, args.budgets)
                    blocks.setdefault((arm, n), []).append(figures)
                    a = figures["all"]
                    print(f"round {k + 1} N={n} {arm:<13} attainment {a['attainment']:.3f} "
                          f"P50/P99 {a['p50_ms']:.0f}/{a['p99_ms']:.0f} ms "
                          f"outcomes {result.outcomes}", flush=True)
        if args.paired:
            paired = run_paired(servers, args.paired, params)
    finally:
        for server in servers.values():
            server.stop()
        workdir.cleanup()
    table = aggregate(blocks)
    table = {arm: table[arm] for arm in args.arms}
    print(f"\nmedian of {args.rounds} interleaved round(s); P50/P99 over every answer "
          "(refusals included), chunk P50/P99 over chunks only; model "
          f"{params['model']}; xinfer: {args.params_file or 'config/fleet.yaml'}")
    _print_table(table, args.robots, classes)
    pairs = _print_paired(args.paired, paired_table(paired), params) if paired else {}
    if args.figure:
        _figure(table, args.robots, classes, args.figure)
    if args.json:
        _write_json(args, params=params, started=started, table=table, blocks=blocks,
                    pairs=pairs, paired=paired)
    print(f"wall time {time.time() - started:.0f} s")
    return 0
