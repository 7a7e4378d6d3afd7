"""``xinfer-fleet``: start a fleet on this machine, watch it, report on it.

Starts the node plan of :func:`xinfer_ros.fleet.plan.build_fleet_plan` (the same one
``fleet.launch.py`` uses) as processes without ``ros2 launch``: the inference server,
and an RTC executor and a simulated robot per robot. It shows live progress, stops the
fleet ``--duration`` seconds after the server's first answer (model loading is not
timed), prints a per-robot report (requests, attainment,
P50/P99, starvation, status counts) and writes JSON and plots.

Each executor also reports how late its Eq. 1 sends go out after ``max(s_j + T_E, r_j)``
(``send_lag_*_ms``, cumulative since it started, warm-up included); the fleet line gives
the request-weighted mean of the robots' means, the largest robot P95 and the largest
lag: the figures that calibrate the simulator's ``send_jitter``.

Budgets fit the machine: the workloads' budgets are the paper's, set for its GPU. With
``--budget-scale auto`` (the default) they are multiplied by how much slower one request
runs alone on the server's calibrated rate table than on the paper's GPU (the shipped
default table), never by less than 1, and the run says so in one line. The report gives
attainment per budget class; the plot marks each robot's budget and its misses.

With ``--compare-sim`` it also runs the closed-loop simulator on the same policy,
workload, seed, robots, window, rate table and slots, and with the server's
``phase_spread`` setting, and reports the simulator's attainment beside the fleet's.
The report names the ``phase_spread`` setting the server ran with.

DDS stays on loopback: ``ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST`` is set unless the
caller set it, and a random ``ROS_DOMAIN_ID`` is chosen unless one is set.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import yaml

from xinfer_ros.cli.fleet_report import (
    ExecutorFigures,
    FailoverReport,
    FleetReport,
    FleetTotal,
    RobotReport,
    SendLag,
    ServerReport,
    SimComparison,
)
from xinfer_ros.core.metrics import ResponseRecord, WindowMetrics
from xinfer_ros.core.registry import SERVED_POLICIES
from xinfer_ros.engine.speed_probe import SpeedProbe
from xinfer_ros.fleet.plan import (
    BACKENDS,
    NodeParams,
    NodeSpec,
    PlanError,
    build_fleet_plan,
    config_file,
    server_names,
)

if TYPE_CHECKING:
    from xinfer_ros.nodes.fleet_monitor import FleetMonitor, RobotObservation

    #: What the fleet monitor saw, per robot.
    Snapshot = dict[str, RobotObservation]

__all__ = ["build_parser", "main"]

WORKLOADS = ("phases", "multi_budget", "parcel", "uniform", "bursty")
POLICIES = SERVED_POLICIES


def build_parser() -> argparse.ArgumentParser:
    """The command-line parser."""
    p = argparse.ArgumentParser(prog="xinfer-fleet", description=__doc__.splitlines()[0])
    p.add_argument("--robots", default="3", help="robot count or comma-separated names")
    p.add_argument("--servers", type=int, default=1,
                   help="inference servers; more than one adds the fleet manager, which "
                        "assigns the robots to them")
    p.add_argument("--fail-server-at", type=float, default=None, metavar="S",
                   help="fail the last server S seconds after the first answer and report "
                        "the failover (needs --servers 2 or more)")
    p.add_argument("--fail-mode", choices=("kill", "hang"), default="kill",
                   help="kill: SIGKILL (a crash); hang: SIGSTOP for --hang-s, then SIGCONT "
                        "(a stalled driver: it wakes up and answers late)")
    p.add_argument("--hang-s", type=float, default=3.0,
                   help="how long a hung server stays stopped (s)")
    p.add_argument("--backend", choices=BACKENDS, default=None,
                   help="model backend (default: config/fleet.yaml)")
    p.add_argument("--model", default=None, help="model preset (default: config)")
    p.add_argument("--model-path", default=None, metavar="DIR",
                   help="checkpoint directory of the model (π0: either layout)")
    p.add_argument("--policy", choices=POLICIES, default=None, help="scheduling policy")
    p.add_argument("--workload", choices=WORKLOADS, default="phases",
                   help="budget pattern of the simulated robots")
    p.add_argument("--duration", type=float, default=60.0,
                   help="run length once the server answers (s)")
    p.add_argument("--startup-timeout", type=float, default=180.0,
                   help="give up when the server has answered nothing after this long (s)")
    p.add_argument("--camera-rate", type=float, default=None,
                   help="simulated camera frame rate (Hz; default: robot_sim's 10 Hz)")
    p.add_argument("--warmup", type=float, default=10.0,
                   help="requests sent in the first WARMUP seconds after the server's first "
                        "answer are not measured (s)")
    p.add_argument("--drain", type=float, default=1.0,
                   help="requests sent in the last DRAIN seconds are not measured (s)")
    p.add_argument("--config", type=Path, default=None, help="server parameter file")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", type=Path, default=None, help="write the report here")
    p.add_argument("--out", type=Path, default=Path("out/fleet"),
                   help="directory for logs, plots and the JSON report")
    p.add_argument("--no-progress", action="store_true", help="no live progress bar")
    p.add_argument("--budget-scale", default="auto", type=_scale_arg,
                   help="factor on the workload's budgets, or auto: fit them to the "
                        "server's calibrated rate table (default)")
    p.add_argument("--compare-sim", action="store_true",
                   help="also simulate the same fleet (policy, workload, seed, table, slots, "
                        "phase_spread) and report its attainment")
    p.add_argument("--arm", default=None, metavar="LABEL",
                   help="name this run's arm in the report (xinfer-bench compare groups "
                        "runs by it)")
    p.add_argument("--no-speed-probe", dest="speed_probe", action="store_false",
                   help="do not time two fixed work units every 0.25 s beside the fleet "
                        "(the host-speed covariate of xinfer-bench compare)")
    return p


def _scale_arg(text: str) -> float | None:
    if text == "auto":
        return None
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0.01 <= value <= 100.0:
        raise argparse.ArgumentTypeError(f"expected auto or a factor in [0.01, 100], got {text!r}")
    return value


def _backend_param(server: NodeParams, key: str, default: object) -> Any:
    """A ``<backend>.<key>`` server parameter, flat or nested as YAML writes it."""
    backend = server["backend"]
    nested = server.get(backend)
    if isinstance(nested, dict) and key in nested:
        return nested[key]
    return server.get(f"{backend}.{key}", default)


def _server_table(server: NodeParams) -> str | None:
    """The rate-table file the server reads (``None``: the shipped default)."""
    table = _backend_param(server, "rate_table", "")
    return config_file(str(table)) if table else None


def fit_budget_scale(server: NodeParams) -> tuple[float, str]:
    """The factor that fits the paper's budgets to the server's calibrated table.

    Returns:
        The factor (at least 1) and a one-line reason.
    """
    from xinfer_ros.core.rate_table import default_rate_table, resolve_rate_table

    path = _server_table(server)
    table = resolve_rate_table(path)
    here, paper = table.isolated_request_s, default_rate_table().isolated_request_s
    scale = max(1.0, round(here / paper, 2))
    where = Path(path).name if path else "the paper's GPU (default table)"
    if scale == 1.0:
        return scale, (f"budgets as in the paper: one request alone takes {here * 1e3:.0f} ms "
                       f"on {where}, within the paper GPU's {paper * 1e3:.0f} ms")
    return scale, (f"budgets x{scale:g}: one request alone takes {here * 1e3:.0f} ms on this "
                   f"machine ({where}) against {paper * 1e3:.0f} ms on the paper's GPU")


def simulate_fleet(server: NodeParams, robots: int, *, workload: str, seed: int,
                   duration: float, window: tuple[float, float],
                   budget_scale: float = 1.0) -> SimComparison:
    """The simulator's metrics for the fleet the server parameters describe.

    Same policy, workload (and budget scale), seed, robots, window, rate table, slots
    and ``phase_spread`` as the server; no execution noise (the emulated backend runs the
    table exactly).
    """
    from xinfer_ros.sim.engine_loop import SimConfig, simulate

    slots = list(_backend_param(server, "slots", [0]))
    cfg = SimConfig(policy=server["policy"], robots=robots, workload=workload, seed=seed,
                    duration=float(duration), window=window, rate_table=_server_table(server),
                    noise=0.0, slots=None if slots == [0] else tuple(slots),
                    phase_spread=bool(server.get("phase_spread", False)),
                    budget_scale=budget_scale)
    return SimComparison(
        config={k: getattr(cfg, k) for k in (
            "policy", "robots", "workload", "seed", "duration", "window", "rate_table",
            "noise", "slots", "phase_spread", "budget_scale")},
        phase_spread=cfg.phase_spread, metrics=simulate(cfg).metrics)


def _loopback_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ if environ is None else environ)
    env.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    env.setdefault("ROS_DOMAIN_ID", str(random.SystemRandom().randint(1, 100)))
    # Keep each node's torch/BLAS from claiming every core of a small machine.
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


def _spawn(spec: NodeSpec, workdir: Path, env: dict[str, str]) -> subprocess.Popen:
    label = f"{spec.namespace.strip('/') or 'server'}_{spec.name}"
    params = workdir / f"{label}.yaml"
    params.write_text(yaml.safe_dump({"/**": {"ros__parameters": spec.parameters}}))
    log = (workdir / f"{label}.log").open("w")
    cmd = [sys.executable, "-m", spec.module, "--ros-args", "-r", f"__ns:={spec.namespace}",
           "-r", f"__node:={spec.name}", "--params-file", str(params)]
    return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env,
                            start_new_session=True)


def _stop(procs: list[subprocess.Popen], grace: float = 8.0) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
    end = time.monotonic() + grace
    for proc in procs:
        try:
            proc.wait(timeout=max(0.1, end - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _robot_report(obs: RobotObservation, window: tuple[float, float]) -> RobotReport:
    from xinfer_ros.core.metrics import summarize

    return RobotReport(
        metrics=summarize(obs.records, window=window), statuses=dict(obs.statuses),
        chunks_by_server=dict(Counter(server for _, server, _ in obs.answers)),
        executor=None if obs.executor is None else ExecutorFigures.of(obs.executor))


def _fleet_send_lag(robots: dict[str, RobotReport]) -> SendLag:
    """Fleet send lag: request-weighted mean of robot means, max of P95s and of maxima.

    Robots whose executor never reported are left out; all ``None`` when none reported.
    """
    seen = [r.executor for r in robots.values() if r.executor is not None]
    if not seen:
        return SendLag()
    weight = sum(ex.requests_sent for ex in seen)
    mean = (sum(ex.send_lag_mean_ms * ex.requests_sent for ex in seen) / weight
            if weight else 0.0)
    return SendLag(send_lag_mean_ms=mean,
                   send_lag_p95_ms=max(ex.send_lag_p95_ms for ex in seen),
                   send_lag_max_ms=max(ex.send_lag_max_ms for ex in seen))


class _Row(NamedTuple):
    """One line of the printed table (``None``: a blank cell)."""

    metrics: WindowMetrics
    statuses: dict[str, int]
    starved: int | None
    late: int | None
    lag: float | None
    lag95: float | None


def _rows(report: FleetReport) -> dict[str, _Row]:
    rows = {}
    for name, r in report.robots.items():
        ex = r.executor
        rows[name] = (_Row(r.metrics, r.statuses, None, None, None, None) if ex is None else
                      _Row(r.metrics, r.statuses, ex.starved_ticks, ex.handoff_violations,
                           ex.send_lag_mean_ms, ex.send_lag_p95_ms))
    total = report.total
    # ALL's late column is the monitor's count; the robots' are their executors'.
    rows["ALL"] = _Row(total.metrics, total.statuses, None, total.metrics.handoff_violations,
                       total.send_lag.send_lag_mean_ms, total.send_lag.send_lag_p95_ms)
    return rows


def _cell(value: float | None, fmt: str = "") -> str:
    return "" if value is None else format(value, fmt)


def _print_report(report: FleetReport) -> None:
    # P50/P99 over chunks; "all" over every answer, refusals (shed, rejected) included.
    head = (f"{'robot':<12}{'requests':>9}{'attain':>8}{'P50 ms':>8}{'P99 ms':>8}"
            f"{'all P50':>8}{'all P99':>8}"
            f"{'starved':>9}{'late':>6}{'lag ms':>8}{'lag95':>7}  statuses")
    print(head)
    print("-" * len(head))
    for name, r in _rows(report).items():
        m = r.metrics
        print(f"{name:<12}{m.requests:>9}{m.attainment * 100:>7.1f}%"
              f"{m.latency_p50_ms:>8.1f}{m.latency_p99_ms:>8.1f}"
              f"{m.answer_p50_ms:>8.1f}{m.answer_p99_ms:>8.1f}"
              f"{_cell(r.starved):>9}{_cell(r.late):>6}"
              f"{_cell(r.lag, '.2f'):>8}{_cell(r.lag95, '.2f'):>7}  {r.statuses}")
    if len(report.servers) > 1:
        for name, srv in report.servers.items():
            sm = srv.metrics
            print(f"{name:<12}{sm.requests:>9}{sm.attainment * 100:>7.1f}%"
                  f"{sm.latency_p50_ms:>8.1f}{sm.latency_p99_ms:>8.1f}  robots "
                  f"{', '.join(srv.robots)}")
    total = report.total
    for budget, attainment in total.metrics.per_budget.items():
        print(f"  budget {budget:>6} ms: {total.metrics.per_budget_requests[budget]:>5} "
              f"requests, attainment {attainment * 100:5.1f}%")
    steps = [(r.executor.switch_step_max, r.executor.within_step_max)
             for r in report.robots.values() if r.executor is not None]
    if steps:
        print(f"RTC splices: largest command step at a chunk switch "
              f"{max(a for a, _ in steps):.3f}, within a chunk {max(b for _, b in steps):.3f} "
              "(robot units, worst joint and robot)")
    lag = total.send_lag
    if lag.send_lag_mean_ms is not None:
        print(f"\nsend lag behind Eq. 1 (ms, since start): mean "
              f"{lag.send_lag_mean_ms:.2f} (request-weighted over robots), P95 "
              f"{lag.send_lag_p95_ms:.2f} (worst robot), max {lag.send_lag_max_ms:.2f}")


def _plot(report: FleetReport, records: dict[str, list[ResponseRecord]], out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, ax = plt.subplots(1, 2, figsize=(11, 4))
    for name, unordered in records.items():
        recs = sorted(unordered, key=lambda r: r.send_time)
        lat = np.sort([r.latency * 1e3 for r in recs if r.response_time is not None])
        if len(lat):
            ax[0].plot(lat, np.arange(1, len(lat) + 1) / len(lat), label=name)
        sends = [r.send_time for r in recs]
        line = ax[1].plot(sends, [r.latency * 1e3 for r in recs], ".", ms=3, label=name)[0]
        # The robot's budget as it changed, and its misses on top.
        ax[1].step(sends, [r.budget * 1e3 for r in recs], where="post", lw=0.8,
                   color=line.get_color(), alpha=0.6)
        missed = [r for r in recs if not r.on_time]
        ax[1].plot([r.send_time for r in missed],
                   [r.latency * 1e3 if r.response_time is not None else r.budget * 1e3
                    for r in missed], "x", ms=4, color=line.get_color())
    for budget in report.total.metrics.per_budget:
        ax[0].axvline(float(budget), ls="--", lw=0.8, color="grey")
    ax[1].axvspan(*report.window_s, color="grey", alpha=0.08, lw=0)
    ax[0].set(xlabel="latency (ms)", ylabel="CDF", title="request latency (dashed: budgets)")
    ax[1].set(xlabel="send time (s)", ylabel="latency (ms)",
              title="latency over time (steps: budget, x: miss; shaded: measured)")
    ax[0].legend(fontsize=7)
    fig.suptitle(f"xinfer-fleet: {len(report.robots)} robots, {report.policy}, "
                 f"{report.backend} backend, budgets x{report.budget_scale:g}")
    fig.tight_layout()
    path = out / "fleet_latency.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def run_fleet(args: argparse.Namespace) -> int:
    """Start the fleet, monitor it for ``args.duration`` seconds and report."""
    from xinfer_ros.nodes.fleet_monitor import watching

    try:
        plan, scale, why = _plan_fleet(args)
    except (PlanError, OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    server = plan[0].parameters
    robots = [s.namespace.rsplit("/", 1)[-1] for s in plan if s.executable == "rtc_executor"]
    env = _loopback_env()
    os.environ.update({k: env[k] for k in ("ROS_AUTOMATIC_DISCOVERY_RANGE", "ROS_DOMAIN_ID")})
    args.out.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="run_", dir=args.out))
    phase_spread = bool(server.get("phase_spread", False))
    print(f"xinfer-fleet: {len(robots)} robots on {args.servers} server(s), model "
          f"{server['model']} "
          f"({server['backend']} backend), policy {server['policy']}, workload {args.workload},"
          f" phase_spread {'on' if phase_spread else 'off'}, {args.duration:.0f} s; "
          f"ROS_DOMAIN_ID={env['ROS_DOMAIN_ID']} (loopback only); logs in {workdir}")
    print(f"xinfer-fleet: {why}")

    # Started before the monitor's threads (see SpeedProbe.start); its clock is monotonic.
    probe = SpeedProbe() if args.speed_probe else None
    with probe if probe is not None else contextlib.nullcontext():
        t0, t0_probe = time.time(), time.monotonic()
        with watching(robots, t0) as monitor:
            procs = [_spawn(spec, workdir, env) for spec in plan]
            try:
                ready, died, failed_at, resumed_at = _watch(args, plan, procs, monitor, t0)
            finally:
                _stop(procs)
    if ready is None:
        print(f"error: the server answered no request within {args.startup_timeout:g} s"
              f"{'; node(s) exited: ' + ', '.join(died) if died else ''}; see {workdir}",
              file=sys.stderr)
        return 1
    print(f"xinfer-fleet: the server answered {ready:.1f} s after the start; the run is "
          f"timed from then")
    # A request sent in the last seconds may still be in flight when the fleet stops;
    # only requests that had time to be answered are measured.
    window = (ready + args.warmup, max(ready + args.warmup, ready + args.duration - args.drain))

    snap = monitor.snapshot(include_pending=True)
    report = _build_report(args, server, snap, ready=ready, window=window, scale=scale,
                           why=why, died=died, servers=server_names(plan))
    report.arm = args.arm
    if probe is not None:
        report.speed_probe = probe.summary(t0_probe + window[0], t0_probe + window[1])
    if failed_at is not None:
        report.failover = _failover(plan, snap, failed_at, resumed_at)
    _publish(args, report, snap)
    return _exit_status(report, died, workdir)


def _publish(args: argparse.Namespace, report: FleetReport, snap: Snapshot) -> None:
    """Print the report, write its JSON and plot."""
    print()
    _print_report(report)
    if report.failover is not None:
        _print_failover(report.failover)
    if report.simulator is not None:
        _print_sim_comparison(report.simulator, report)
    json_path = args.json or args.out / "fleet_report.json"
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps(report.to_dict(), indent=2, default=float))
    plot = _plot(report, {n: o.records for n, o in snap.items()}, args.out)
    print(f"\nreport: {json_path}\nplot:   {plot}")


def _plan_fleet(args: argparse.Namespace) -> tuple[list[NodeSpec], float, str]:
    """The node plan, with the robots' budget scale set, and the scale with its reason.

    Raises:
        PlanError: If the plan cannot be built from the arguments and the config.
        OSError: If a config or rate-table file cannot be read.
        ValueError: If a value in them is invalid.
    """
    if args.fail_server_at is not None and args.servers < 2:
        raise PlanError("--fail-server-at needs --servers 2 or more")
    plan = build_fleet_plan(args.robots, backend=args.backend, model=args.model,
                            model_path=args.model_path,
                            policy=args.policy, workload=args.workload,
                            config=args.config, seed=args.seed,
                            camera_rate_hz=args.camera_rate, servers=args.servers)
    scale, why = fit_budget_scale(plan[0].parameters)
    if args.budget_scale is not None:
        scale, why = args.budget_scale, f"budgets x{args.budget_scale:g} (--budget-scale)"
    for spec in plan[1:]:
        if spec.executable == "robot_sim":
            spec.parameters["budget_scale"] = scale
    return plan, scale, why


def _failover(plan: list[NodeSpec], snap: Snapshot, at: float,
              resumed_at: float | None) -> FailoverReport:
    """The report's failover entry: the last server failed ``at`` seconds into the run.

    A hung server woke up at ``resumed_at`` and took robots back.
    """
    from xinfer_ros.fleet.failover import failover, takeover_gaps

    records = [r for o in snap.values() for r in o.records]
    answers = {n: o.answers for n, o in snap.items()}
    victim = server_names(plan)[-1]
    return FailoverReport(
        failover=failover(victim, at, answers, records), resumed_at_s=resumed_at,
        # Robots it took back once heard again: how long each went without an OK chunk.
        takeover_gap_s=(None if resumed_at is None
                        else takeover_gaps(victim, resumed_at, answers)),
        # What the executors dropped as coming from a server they had left, and what the
        # monitor saw arrive from one (the two see requests and chunks in their own
        # orders, so they may differ by a chunk that crossed a switch).
        foreign_chunks=sum(int(o.executor.foreign_chunks) for o in snap.values()
                           if o.executor is not None),
        left_server_chunks_seen=sum(o.left_server_chunks for o in snap.values()))


def _await_in_flight(monitor: FleetMonitor, server: str, timeout: float = 2.0) -> None:
    """Return once a request to ``server`` is in flight (at most ``timeout`` seconds)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end and not monitor.in_flight_to(server):
        time.sleep(0.001)
    time.sleep(0.005)  # let it reach the server


def _watch(args: argparse.Namespace, plan: list[NodeSpec], procs: list[subprocess.Popen],
           monitor: FleetMonitor, t0: float
           ) -> tuple[float | None, list[str], float | None, float | None]:
    """Show live progress until the run is over, a node exits, startup times out or Ctrl-C.

    With ``--fail-server-at`` it kills the last server then; that exit is not a failure.

    Returns:
        When the server first answered (``None``: never), the nodes that exited, when
        the last server failed and when a hung one resumed (``None``: not).
    """
    from tqdm import tqdm

    died: list[str] = []
    ready: float | None = None
    failed_at: float | None = None
    resumed_at: float | None = None
    victim = max(i for i, s in enumerate(plan) if s.executable == "inference_server")
    try:
        with tqdm(total=int(args.duration), unit="s", disable=args.no_progress,
                  desc="fleet", dynamic_ncols=True) as bar:
            while True:
                time.sleep(0.5)
                elapsed = time.time() - t0
                died = [f"{s.namespace}/{s.name} (exit {p.returncode})"
                        for i, (s, p) in enumerate(zip(plan, procs, strict=True))
                        if p.poll() is not None and not (i == victim and failed_at is not None)]
                if died:
                    break
                if ready is None:
                    # The run is timed from the server's first answer, so model loading
                    # (seconds for transformers and the Action workers) is not measured.
                    ready = monitor.first_answer
                    if ready is None and elapsed > args.startup_timeout:
                        break
                    bar.set_postfix(server="starting" if ready is None else "serving")
                    continue
                if elapsed >= ready + args.duration:
                    break
                if args.fail_server_at is not None and failed_at is None \
                        and elapsed >= ready + args.fail_server_at:
                    hang = args.fail_mode == "hang"
                    if hang:
                        # Stall it with work in hand, as a stuck driver would: its answers
                        # come after it wakes up, to robots that have moved on.
                        _await_in_flight(monitor,
                                         str(plan[victim].parameters["server_name"]))
                    os.killpg(procs[victim].pid, signal.SIGSTOP if hang else signal.SIGKILL)
                    failed_at = time.time() - t0
                    tqdm.write(f"xinfer-fleet: {'stopped' if hang else 'killed'} "
                               f"{plan[victim].name} at {failed_at:.1f} s")
                if failed_at is not None and args.fail_mode == "hang" and resumed_at is None \
                        and elapsed >= failed_at + args.hang_s:
                    os.killpg(procs[victim].pid, signal.SIGCONT)
                    resumed_at = time.time() - t0
                    tqdm.write(f"xinfer-fleet: resumed {plan[victim].name} at "
                               f"{resumed_at:.1f} s")
                recs = [r for o in monitor.snapshot().values() for r in o.records]
                done = [r for r in recs if r.send_time >= ready + args.warmup]
                on_time = sum(r.on_time for r in done)
                bar.set_postfix(responses=len(recs),
                                attainment=f"{on_time / len(done):.1%}" if done else "-")
                bar.n = int(elapsed - ready)
                bar.refresh()
    except KeyboardInterrupt:
        print("\ninterrupted; stopping the fleet")
    if failed_at is not None and args.fail_mode == "hang" and resumed_at is None:
        os.killpg(procs[victim].pid, signal.SIGCONT)  # so that SIGINT can stop it
    return ready, died, failed_at, resumed_at


def _build_report(args: argparse.Namespace, server: NodeParams, snap: Snapshot, *,
                  ready: float, window: tuple[float, float], scale: float, why: str,
                  died: list[str], servers: list[str]) -> FleetReport:
    """The report of the run, with the simulator's run beside it if asked for."""
    from xinfer_ros.core.metrics import summarize

    robots = {name: _robot_report(obs, window) for name, obs in snap.items()}
    report = FleetReport(
        policy=str(server["policy"]), backend=str(server["backend"]),
        model=str(server["model"]), workload=args.workload,
        phase_spread=bool(server.get("phase_spread", False)),
        budget_scale=scale, budget_scale_reason=why, duration_s=args.duration,
        server_ready_s=ready, window_s=window, robots=robots,
        total=FleetTotal(summarize([r for o in snap.values() for r in o.records],
                                   window=window),
                         _sum_statuses(snap), _fleet_send_lag(robots)),
        failed_nodes=died,
        servers={name: _server_report(name, snap, window, only=len(servers) == 1)
                 for name in servers})
    if args.compare_sim:
        # One server's simulation, at its share of the robots (the largest share).
        share = max([1, *(len(s.robots) for s in report.servers.values())])
        report.simulator = simulate_fleet(server, share, workload=args.workload,
                                          seed=args.seed, duration=ready + args.duration,
                                          window=window, budget_scale=scale)
    return report


def _server_report(name: str, snap: Snapshot, window: tuple[float, float], *,
                   only: bool) -> ServerReport:
    """One server's figures: the requests addressed to it (every request when ``only``)."""
    from xinfer_ros.core.metrics import summarize

    mine = {robot: [rec for rec, by in zip(o.records, o.served_by, strict=True)
                    if only or by == name] for robot, o in snap.items()}
    return ServerReport(robots=[r for r, recs in mine.items() if recs],
                        metrics=summarize([rec for recs in mine.values() for rec in recs],
                                          window=window))


def _print_failover(report: FailoverReport) -> None:
    result = report.failover
    took = result.failover_s
    print(f"\nfailover: {result.server} failed at {result.at:.1f} s; its "
          f"{len(result.robots)} robots served again by another server after "
          f"{'never' if took is None else f'{took:.2f} s'} (worst robot); attainment "
          f"{result.attainment_before:.1%} in the {result.span:g} s before, "
          f"{result.attainment_after:.1%} after; late chunks of the left server dropped "
          f"by executors: {report.foreign_chunks} (the monitor saw "
          f"{report.left_server_chunks_seen} arrive)")
    gaps = report.takeover_gap_s
    if gaps:
        print(f"  woke up at {report.resumed_at_s:.1f} s and took back "
              f"{', '.join(sorted(gaps))}: longest time without an OK chunk "
              f"{max(gaps.values()):.2f} s")


def _print_sim_comparison(sim: SimComparison, report: FleetReport) -> None:
    sm, fleet = sim.metrics, report.total.metrics
    print(f"\nsimulator (same policy, workload, seed, table, slots; phase_spread "
          f"{'on' if report.phase_spread else 'off'}): attainment "
          f"{sm.attainment * 100:.1f}% "
          f"P50/P99 {sm.latency_p50_ms:.1f}/{sm.latency_p99_ms:.1f} ms; fleet "
          f"{fleet.attainment * 100:.1f}% "
          f"({(fleet.attainment - sm.attainment) * 100:+.1f} pt)")


def _exit_status(report: FleetReport, died: list[str], workdir: Path) -> int:
    """1 (with the reason on stderr) if a node exited early or nothing was measured."""
    if died:
        print(f"error: node(s) exited early: {', '.join(died)}; see {workdir}", file=sys.stderr)
        return 1
    failover = report.failover.failover if report.failover is not None else None
    if failover is not None and failover.failover_s is None:
        print(f"error: robots of {failover.server} were not served again after it "
              f"failed: {failover.recovered_s}", file=sys.stderr)
        return 1
    if report.total.metrics.responses == 0:
        print(f"error: no responses in the window; see the logs in {workdir}", file=sys.stderr)
        return 1
    return 0


def _sum_statuses(snap: Snapshot) -> dict[str, int]:
    total: dict[str, int] = {}
    for obs in snap.values():
        for key, count in obs.statuses.items():
            total[key] = total.get(key, 0) + count
    return total


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``xinfer-fleet``."""
    return run_fleet(build_parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
