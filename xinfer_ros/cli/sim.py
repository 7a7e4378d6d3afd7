"""``xinfer-sim``: closed-loop fleet simulation, ERC search, policy comparison, projection.

Sub-commands:

* ``run``: one policy, one workload, one robot count, several rounds;
* ``erc``: effective robot capacity of one policy (walk robot counts upward);
* ``compare``: several policies over a robot-count sweep, with Figure-8-like plots;
* ``project``: Appendix A.1 parcels/h projection from a latency-vs-robots curve;
* ``tune``: choose EDF's or Slack-Gate's parameters by the paper's protocol (App. C.4),
  at the paper's points or on one workload (``compare --tune-baselines`` does the
  latter before comparing);
* ``plan``: how many servers of a rate table a fleet of N robots needs at the target.

Every sub-command prints a table and can write JSON (``--json FILE``) and PNGs
(``--out DIR``). The simulator uses the scheduler's policy objects and rate table.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from xinfer_ros.core.constants import (
    ATTAINMENT_TARGET,
    DEFAULT_SLOTS,
    MEASUREMENT_WINDOW,
    RUN_DURATION,
)
from xinfer_ros.core.metrics import RoundSummary, summarize_rounds
from xinfer_ros.core.registry import POLICIES
from xinfer_ros.core.timing import MS_PER_S
from xinfer_ros.sim import tuning
from xinfer_ros.sim.engine_loop import RunResult, SimConfig
from xinfer_ros.sim.erc import Criterion, ErcResult, erc_from_grid, passes, search_erc
from xinfer_ros.sim.tuning import CandidateScore
from xinfer_ros.sim.workloads import WORKLOADS, build_workload

if TYPE_CHECKING:
    from xinfer_ros.sim.engine_band import EngineBand
    from xinfer_ros.sim.sizing import SitePlan

__all__ = ["build_parser", "main"]

#: The paper's comparison: the registry's base policies.
_BASELINES = tuple(POLICIES)
#: The simulator's defaults, which the flags' defaults show in their own units.
_SIM = SimConfig()


# -- argument helpers ----------------------------------------------------------------------
def parse_counts(text: str) -> list[int]:
    """Parse robot counts: ``"18"``, ``"8,10,12"``, ``"8-20"`` or ``"8-20:2"``.

    Raises:
        argparse.ArgumentTypeError: On malformed input or counts < 1.
    """
    out: list[int] = []
    try:
        for raw in text.split(","):
            part = raw.strip()
            if "-" in part:
                rng, _, step = part.partition(":")
                lo, hi = (int(x) for x in rng.split("-", 1))
                out.extend(range(lo, hi + 1, int(step) if step else 1))
            elif part:
                out.append(int(part))
    except ValueError:
        raise argparse.ArgumentTypeError(f"bad robot counts {text!r}") from None
    if not out or min(out) < 1:
        raise argparse.ArgumentTypeError(f"robot counts must be >= 1, got {text!r}")
    return sorted(set(out))


def _budgets(text: str) -> tuple[float, ...]:
    """Parse a comma-separated budget list in ms."""
    try:
        vals = tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"bad budget list {text!r}") from None
    if not vals or any(not v > 0 for v in vals):
        raise argparse.ArgumentTypeError(f"budgets must be positive ms, got {text!r}")
    return vals


def _slots(text: str) -> tuple[int, int, int]:
    """Parse ``V,P,A`` slot counts (each >= 1)."""
    try:
        vals = tuple(int(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"bad slots {text!r}: need V,P,A integers") from None
    if len(vals) != 3 or min(vals) < 1:
        raise argparse.ArgumentTypeError(f"slots need three counts >= 1, got {text!r}")
    return (vals[0], vals[1], vals[2])


def _batch(text: str) -> int:
    """Parse a ``--max-batch`` (an integer >= 1)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"bad batch size {text!r}: need an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"batch size must be >= 1, got {value}")
    return value


def _add_common(p: argparse.ArgumentParser, *, workload: bool = True) -> None:
    """Flags shared by every simulating sub-command (``tune``: own workloads, slots)."""
    if workload:
        p.add_argument("--workload", default="phases", choices=WORKLOADS)
        p.add_argument("--slots", type=_slots, default=None,
                       help="execution slots V,P,A (default: the policy's; a slots "
                            "--policy-arg or a tuned setting wins)")
    p.add_argument("--max-batch", type=_batch, default=_SIM.max_batch, metavar="N",
                   help="model an engine that runs up to N units of a stage as one batch "
                        "(use a table calibrated with the same --max-batch)")
    p.add_argument("--rounds", type=int, default=3, help="rounds (different seeds)")
    p.add_argument("--seed", type=int, default=0, help="base seed of the rounds")
    p.add_argument("--duration", type=float, default=RUN_DURATION,
                   help="last send time, s (window is [warmup, duration))")
    p.add_argument("--warmup", type=float, default=MEASUREMENT_WINDOW[0],
                   help="warm-up before the window, s")
    p.add_argument("--rate-table", default=None, help="rate-table JSON (default: shipped)")
    p.add_argument("--noise", type=float, default=_SIM.noise,
                   help="log-normal sigma of execution-time noise")
    p.add_argument("--tick-ms", type=float, default=_SIM.tick * MS_PER_S,
                   help="policy tick while work waits")
    p.add_argument("--cpu-prep-ms", type=float, default=_SIM.cpu_prep * MS_PER_S,
                   help="server CPU preparation")
    p.add_argument("--send-jitter-ms", type=float, default=0.0,
                   help="mean exponential client handling delay per send (0: Eq. 1 exact)")
    p.add_argument("--phase-spread", action="store_true",
                   help="hold responses later than T_E to spread the robots' send phases")
    p.add_argument("--budgets", type=_budgets, default=None,
                   help="custom/uniform budgets in ms, e.g. 90,400")
    p.add_argument("--phase-length", type=int, default=_SIM.phase_length,
                   help="responses per budget phase")
    p.add_argument("--budget-csv", default=None, help="per-response budgets (ms) for custom")
    p.add_argument("--parcel-traces", default=None, help="parcel trace file")
    p.add_argument("--policy-arg", action="append", default=[], metavar="KEY=VALUE",
                   help="extra policy constructor argument (JSON value), repeatable")
    p.add_argument("--workers", type=int, default=None, help="processes (default 2)")
    p.add_argument("--json", type=Path, default=None, help="write results as JSON")
    p.add_argument("--out", type=Path, default=None, help="directory for JSON and plots")
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def _add_prediction_error(p: argparse.ArgumentParser) -> None:
    p.add_argument("--predictor-error-ms", type=float, default=None, metavar="MS",
                   help="make the GPU stray from the predictor's table until XInfer's "
                        "running-stage prediction MAE is MS (replaces --noise; calibrated "
                        "on this workload and table, measured and reported per run)")


def build_parser() -> argparse.ArgumentParser:
    """Build the ``xinfer-sim`` argument parser."""
    parser = argparse.ArgumentParser(prog="xinfer-sim", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="simulate one policy at one robot count")
    run.add_argument("--policy", default="xinfer")
    run.add_argument("--robots", type=int, default=8)
    _add_common(run)
    _add_prediction_error(run)

    erc = sub.add_parser("erc", help="effective robot capacity of one policy")
    erc.add_argument("--policy", default="xinfer")
    erc.add_argument("--robots", type=parse_counts, default=parse_counts("4-30"),
                     help="range to walk, e.g. 8-24")
    erc.add_argument("--criterion", choices=("auto", "attainment", "latency"), default="auto")
    erc.add_argument("--patience", type=int, default=1,
                     help="stop after this many consecutive failing counts")
    _add_common(erc)
    _add_prediction_error(erc)

    cmp_ = sub.add_parser("compare", help="policies over a robot-count sweep, with plots")
    cmp_.add_argument("--policy", default=",".join(_BASELINES),
                      help="comma-separated policies")
    cmp_.add_argument("--robots", type=parse_counts,
                      default=parse_counts("8,10,12,14,15,16,18,20"))
    cmp_.add_argument("--criterion", choices=("auto", "attainment", "latency"), default="auto")
    cmp_.add_argument("--tune-baselines", action="store_true",
                      help="first tune EDF and Slack-Gate on this workload (App. C.4 rules, "
                           "never against XInfer) and compare them as tuned")
    cmp_.add_argument("--tune-robots", type=int, default=None, metavar="N",
                      help="robot count of the tuning point (default: per workload)")
    cmp_.add_argument("--tune-seed", type=int, default=None,
                      help=f"base seed of the tuning rounds (default {tuning.TUNING_SEED}; "
                           "never --seed's rounds)")
    _add_common(cmp_)
    _add_prediction_error(cmp_)

    proj = sub.add_parser("project", help="App. A.1 parcels/h projection (Figure 2)")
    proj.add_argument("--policy", default="xinfer", help="comma-separated policies")
    proj.add_argument("--robots", type=parse_counts, default=parse_counts("1-16"))
    proj.add_argument("--from-json", type=Path, default=None,
                      help="use latency_p50_ms from a compare/run JSON instead of simulating")
    _add_common(proj)
    proj.set_defaults(workload="uniform", rounds=1)

    tune = sub.add_parser("tune", help="baseline parameters by the App. C.4 protocol")
    tune.add_argument("--policy", choices=("edf", "slack_gate"), default="edf")
    tune.add_argument("--slots", type=_slots, default=DEFAULT_SLOTS,
                      help="physical slots V,P,A: the runs' slots and the limit grid's bounds")
    tune.add_argument("--thresholds", type=_budgets, default=None,
                      help="Slack-Gate thresholds in ms (default 20,40,80)")
    tune.add_argument("--top", type=int, default=12, help="candidates shown, best first")
    tune.add_argument("--workload", default=None, choices=WORKLOADS,
                      help="tune on this workload alone (default: the paper's points)")
    tune.add_argument("--robots", type=int, default=None,
                      help="robot count of the --workload point (default: per workload)")
    _add_common(tune, workload=False)
    _add_prediction_error(tune)
    tune.set_defaults(seed=tuning.TUNING_SEED)

    plan = sub.add_parser("plan", help="servers of this rate table a fleet of N robots needs")
    plan.add_argument("--robots", type=int, required=True, help="fleet size N")
    plan.add_argument("--policy", default="xinfer")
    plan.add_argument("--criterion", choices=("auto", "attainment", "latency"), default="auto")
    plan.add_argument("--search", type=parse_counts, default=parse_counts("4-40"),
                      help="robot counts the one-server ERC search walks")
    plan.add_argument("--patience", type=int, default=1,
                      help="stop the walk after this many consecutive failing counts")
    plan.add_argument("--engine-check", nargs="+", default=None, metavar="JSON",
                      help="xinfer-bench engine --compare-sim --json runs of this policy, "
                           "workload, table, slots and batch size: the plan also states "
                           "the simulator's measured error and the plan at its worse end")
    _add_common(plan)
    _add_prediction_error(plan)
    return parser


def _policy_kwargs(pairs: Sequence[str]) -> dict[str, Any]:
    """``KEY=VALUE`` pairs with JSON values (strings need not be quoted)."""
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep:
            raise SystemExit(f"--policy-arg needs KEY=VALUE, got {pair!r}")
        try:
            out[key.strip()] = json.loads(raw)
        except json.JSONDecodeError:
            out[key.strip()] = raw
    return out


def _config(args: argparse.Namespace, policy: str, robots: int, seed: int, *,
            workload: str | None = None,
            policy_kwargs: dict[str, Any] | None = None) -> SimConfig:
    """SimConfig for one run from the parsed flags (``workload``, kwargs override them)."""
    workload = args.workload if workload is None else workload
    kwargs = _policy_kwargs(args.policy_arg)
    kwargs.update(getattr(args, "tuned", {}).get(policy, {}))
    kwargs.update(policy_kwargs or {})
    return SimConfig(
        policy=policy,
        robots=robots,
        workload=workload,
        seed=seed,
        duration=args.duration,
        window=(args.warmup, args.duration),
        policy_kwargs=kwargs,
        rate_table=args.rate_table,
        noise=args.noise,
        rate_error=getattr(args, "rate_error", 0.0),
        audit=getattr(args, "audit", False),
        cpu_prep=args.cpu_prep_ms / 1000.0,
        tick=args.tick_ms / 1000.0,
        send_jitter=args.send_jitter_ms / 1000.0,
        budgets_ms=args.budgets,
        phase_length=args.phase_length,
        budget_csv=args.budget_csv,
        parcel_traces=args.parcel_traces,
        slots=getattr(args, "slots", None),
        phase_spread=args.phase_spread,
        timeline_bin=2.0 if workload == "bursty" else 0.0,
        max_batch=args.max_batch,
    )


def _criterion(args: argparse.Namespace) -> Criterion:
    """Resolve ``auto``: latency criterion for a uniform budget, attainment otherwise."""
    if getattr(args, "criterion", "auto") != "auto":
        return Criterion(args.criterion)
    wl = build_workload(args.workload, 2, budgets_ms=args.budgets,
                        phase_length=args.phase_length, budget_csv=args.budget_csv,
                        parcel_traces=args.parcel_traces)
    return Criterion.LATENCY if wl.uniform_budget else Criterion.ATTAINMENT


def _run_grid(
    args: argparse.Namespace, policies: Sequence[str], counts: Sequence[int], desc: str
) -> dict[tuple[str, int], list[RunResult]]:
    """Run every (policy, count, round) and group results."""
    from xinfer_ros.sim.runner import round_seeds, run_many

    seeds = round_seeds(args.seed, args.rounds)
    keys = [(p, n) for p in policies for n in counts]
    configs = [_config(args, p, n, s) for p, n in keys for s in seeds]
    results = run_many(configs, args.workers, progress=not args.quiet, desc=desc)
    out: dict[tuple[str, int], list[RunResult]] = {}
    for cfg, res in zip(configs, results, strict=True):
        out.setdefault((cfg.policy, cfg.robots), []).append(res)
    return out


# -- output --------------------------------------------------------------------------------
def _fmt(v: float, spec: str = ".1f") -> str:
    return "nan" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, spec)


_COLUMNS = (
    ("attainment", "att%", 100.0, ".2f"),
    ("goodput_rps", "goodput", 1.0, ".1f"),
    ("throughput_rps", "thr", 1.0, ".1f"),
    ("latency_p50_ms", "p50", 1.0, ".1f"),
    ("latency_p95_ms", "p95", 1.0, ".1f"),
    ("latency_p99_ms", "p99", 1.0, ".1f"),
    ("mean_wide_latency_ms", "wide", 1.0, ".1f"),
    ("handoff_violation_rate", "handoff%", 100.0, ".1f"),
    ("starved_per_robot_hour", "starve/rh", 1.0, ".0f"),
)


def _table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows, strict=True)]
    lines = ["  ".join(h.rjust(w) for h, w in zip(header, widths, strict=True))]
    lines += ["  ".join(str(c).rjust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join(lines)


def _summary_row(label: list[str], s: RoundSummary, verdicts: list[bool]) -> list[str]:
    cells = [_fmt(s.mean[k] * scale, spec) for k, _, scale, spec in _COLUMNS]
    lo = _fmt(s.minimum["attainment"] * 100, ".2f")
    return [*label, *cells, lo, "".join("P" if v else "F" for v in verdicts)]


def _header(first: list[str]) -> list[str]:
    return [*first, *(c[1] for c in _COLUMNS), "min att%", "rounds"]


def _write_json(args: argparse.Namespace, name: str, data: dict[str, Any]) -> None:
    if getattr(args, "calibration", None) is not None:
        data = {**data, "prediction_error": dataclasses.asdict(args.calibration)}
    paths = []
    if args.json is not None:
        paths.append(args.json)
    if args.out is not None:
        paths.append(args.out / f"{name}.json")
    for p in paths:
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(json.dumps(data, indent=1, sort_keys=True, default=str) + "\n")
        print(f"wrote {p}", file=sys.stderr)


def _group_json(results: list[RunResult], crit: Criterion) -> dict[str, Any]:
    s = summarize_rounds([r.metrics for r in results])
    return {
        "rounds": [r.to_dict() for r in results],
        "summary": s.to_dict(),
        "passes": [passes(r.metrics, crit) for r in results],
    }


# -- sub-commands --------------------------------------------------------------------------
def _cmd_run(args: argparse.Namespace) -> int:
    crit = _criterion(args)
    grid = _run_grid(args, [args.policy], [args.robots], f"{args.policy} x{args.robots}")
    results = grid[(args.policy, args.robots)]
    rows = []
    for i, r in enumerate(results):
        m = r.metrics
        rows.append([f"round {i}", *(_fmt(getattr(m, k) * sc, sp) for k, _, sc, sp in _COLUMNS),
                     "P" if passes(m, crit) else "F"])
    s = summarize_rounds([r.metrics for r in results])
    rows.append(["mean", *(_fmt(s.mean[k] * sc, sp) for k, _, sc, sp in _COLUMNS), ""])
    print(f"{args.policy} on {args.workload}, {args.robots} robots, criterion {crit.value}")
    print(_table(rows, ["", *(c[1] for c in _COLUMNS), "pass"]))
    if args.audit:
        print(f"running-stage prediction MAE: {_mae_ms(results):.2f} ms (mean of rounds)")
    per_budget = {k.split(".", 1)[1]: v for k, v in s.mean.items() if k.startswith("per_budget.")}
    if len(per_budget) > 1:
        ordered = sorted(per_budget.items(), key=lambda x: float(x[0]))
        print("per-budget attainment: "
              + ", ".join(f"{b} ms {v * 100:.2f}%" for b, v in ordered))
    _write_json(args, "run", {"command": "run", "policy": args.policy, "workload": args.workload,
                              "robots": args.robots, "criterion": crit.value,
                              **_group_json(results, crit)})
    return 0


def _cmd_erc(args: argparse.Namespace) -> int:
    from xinfer_ros.sim.runner import round_seeds, run_many

    crit = _criterion(args)
    seeds = round_seeds(args.seed, args.rounds)
    per_count: dict[int, list[RunResult]] = {}

    def evaluate(n: int) -> list[Any]:
        cfgs = [_config(args, args.policy, n, s) for s in seeds]
        per_count[n] = run_many(cfgs, args.workers, progress=not args.quiet,
                                desc=f"{args.policy} x{n}")
        return [r.metrics for r in per_count[n]]

    def report(n: int, verdicts: list[bool]) -> None:
        s = summarize_rounds([r.metrics for r in per_count[n]])
        lines = _table([_summary_row([str(n)], s, verdicts)], _header(["robots"])).splitlines()
        if args.audit:
            lines[1] += f"  MAE {_mae_ms(per_count[n]):.2f} ms"
        print("\n".join(lines if n == min(per_count) else lines[1:]), flush=True)

    print(f"ERC of {args.policy} on {args.workload}, criterion {crit.value}")
    res = search_erc(evaluate, crit, min(args.robots), max(args.robots),
                     patience=args.patience, on_count=report)
    print(f"ERC = {res.erc} robots (adjacent failing count: {res.failing})")
    _write_json(args, "erc", {
        "command": "erc", "policy": args.policy, "workload": args.workload,
        **res.to_dict(),
        "counts": {str(n): _group_json(rs, crit) for n, rs in sorted(per_count.items())},
    })
    return 0


def _sweep_table(
    grid: dict[tuple[str, int], list[RunResult]], crit: Criterion
) -> tuple[dict[str, ErcResult], dict[str, dict[int, dict[str, float]]], list[list[str]]]:
    """Per-policy ERC, plot series and table rows from a compare grid."""
    policies = list(dict.fromkeys(p for p, _ in grid))
    ercs: dict[str, ErcResult] = {}
    series: dict[str, dict[int, dict[str, float]]] = {}
    rows: list[list[str]] = []
    for p in policies:
        counts = sorted(n for q, n in grid if q == p)
        verdicts = {n: [passes(r.metrics, crit) for r in grid[(p, n)]] for n in counts}
        ercs[p] = erc_from_grid(verdicts, crit)
        series[p] = {}
        for n in counts:
            s = summarize_rounds([r.metrics for r in grid[(p, n)]])
            flat = {f"mean.{k}": v for k, v in s.mean.items()}
            flat |= {f"min.{k}": v for k, v in s.minimum.items()}
            flat |= {f"max.{k}": v for k, v in s.maximum.items()}
            series[p][n] = flat
            rows.append(_summary_row([p, str(n)], s, verdicts[n]))
    return ercs, series, rows


def _cmd_compare(args: argparse.Namespace) -> int:
    from xinfer_ros.sim import plots

    crit = _criterion(args)
    policies = [p.strip() for p in args.policy.split(",") if p.strip()]
    t0 = time.perf_counter()
    tuned = _tune_baselines(args, policies) if args.tune_baselines else []
    grid = _run_grid(args, policies, args.robots, f"compare {args.workload}")
    wall = time.perf_counter() - t0
    ercs, series, rows = _sweep_table(grid, crit)
    print(f"compare on {args.workload}, criterion {crit.value}, {args.rounds} rounds, "
          f"{args.duration:g} s simulated, wall {wall:.1f} s")
    print(_table(rows, _header(["policy", "robots"])))
    print("ERC: " + ", ".join(f"{p} {e.erc} (fails at {e.failing})" for p, e in ercs.items()))
    if args.audit:
        print("running-stage prediction MAE (ms): " + ", ".join(
            f"{p} x{n} {_mae_ms(rs):.2f}" for (p, n), rs in grid.items()))
    data: dict[str, Any] = {
        "command": "compare", "workload": args.workload, "criterion": crit.value,
        "rounds": args.rounds, "duration_s": args.duration, "wall_s": wall,
        "erc": {p: e.to_dict() for p, e in ercs.items()},
        "series": {p: {str(n): v for n, v in s.items()} for p, s in series.items()},
        "tuned": {r.policy: r.to_dict() for r in tuned},
    }
    if args.workload == "bursty":
        data["timeline"] = _timelines(grid)
        data["burst_attainment"] = _burst_attainment(grid)
        print("burst windows (60-80 s, 120-140 s): " + ", ".join(
            f"{p} x{n} {v['mean'] * 100:.2f}%" for p, by_n in data["burst_attainment"].items()
            for n, v in by_n.items()))
    _write_json(args, "compare", data)
    if args.out is not None:
        _compare_plots(args, plots, series, ercs, data)
    return 0


def _burst_attainment(
    grid: dict[tuple[str, int], list[RunResult]],
) -> dict[str, dict[str, dict[str, Any]]]:
    """Per policy and robot count: each round's burst-window attainment and their mean."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for (p, n), results in grid.items():
        vals = [r.burst_attainment for r in results if r.burst_attainment is not None]
        if vals:
            out.setdefault(p, {})[str(n)] = {"rounds": vals, "mean": sum(vals) / len(vals)}
    return out


def _timelines(grid: dict[tuple[str, int], list[RunResult]]) -> dict[str, Any]:
    """Round-mean attainment timelines per policy at the smallest robot count."""
    import numpy as np

    out: dict[str, Any] = {}
    for (p, n), results in grid.items():
        if p in out or not all(r.timeline for r in results):
            continue
        ts = results[0].timeline[0]  # type: ignore[index]
        att = np.nanmean([r.timeline[1] for r in results], axis=0)  # type: ignore[index]
        out[p] = {"robots": n, "bin_start_s": ts, "attainment": att.tolist()}
    return out


def _compare_plots(args: argparse.Namespace, plots: Any, series: Any, ercs: Any,
                   data: dict[str, Any]) -> None:
    out: Path = args.out
    title = f"{args.workload}: {args.rounds} rounds of {args.duration:g} s"
    paths = [plots.plot_policy_sweep(series, out / f"{args.workload}_sweep.png", title,
                                     {p: e.erc for p, e in ercs.items()})]
    if "timeline" in data:
        tl = {p: (v["bin_start_s"], v["attainment"]) for p, v in data["timeline"].items()}
        paths.append(plots.plot_attainment_over_time(
            tl, out / "bursty_timeline.png", "Bursty robot arrivals: attainment over time",
            shaded=[(60.0, 80.0), (120.0, 140.0)]))
    budgets = {p: {k.split(".", 2)[2]: v for k, v in s[max(s)].items()
                   if k.startswith("mean.per_budget.")} for p, s in series.items()}
    if any(len(b) > 2 for b in budgets.values()):
        paths.append(plots.plot_per_budget(budgets, out / f"{args.workload}_per_budget.png",
                                           f"{args.workload}: attainment per budget"))
    for p in paths:
        print(f"wrote {p}", file=sys.stderr)


def _cmd_project(args: argparse.Namespace) -> int:
    from xinfer_ros.sim import plots
    from xinfer_ros.sim.projection import project_curve

    policies = [p.strip() for p in args.policy.split(",") if p.strip()]
    curves: dict[str, tuple[list[int], list[float]]] = {}
    if args.from_json is not None:
        data = json.loads(args.from_json.read_text())
        for p, s in data.get("series", {}).items():
            ns = sorted(int(n) for n in s)
            curves[p] = (ns, [s[str(n)]["mean.latency_p50_ms"] for n in ns])
    else:
        grid = _run_grid(args, policies, args.robots, "project")
        for p in policies:
            ns = sorted(n for q, n in grid if q == p)
            p50 = [summarize_rounds([r.metrics for r in grid[(p, n)]]).mean["latency_p50_ms"]
                   for n in ns]
            curves[p] = (ns, p50)
    projected = {p: project_curve(ns, p50) for p, (ns, p50) in curves.items()}
    rows = [[p, str(pt.robots), _fmt(pt.p50_ms), _fmt(pt.delay_ms),
             _fmt(pt.parcels_per_hour, ".0f"), f"{pt.band_low:.0f}-{pt.band_high:.0f}",
             "ext" if pt.extrapolated else ""]
            for p, pts in projected.items() for pt in pts]
    print(_table(rows, ["policy", "robots", "p50 ms", "delay ms", "parcels/h", "band", ""]))
    for p, pts in projected.items():
        best = max(pts, key=lambda x: x.parcels_per_hour)
        print(f"{p}: peak {best.parcels_per_hour:.0f} parcels/h at {best.robots} robots")
    _write_json(args, "project", {"command": "project", "curves": {
        p: [asdict(pt) for pt in pts] for p, pts in projected.items()}})
    if args.out is not None:
        path = plots.plot_projection(projected, args.out / "projection.png")
        print(f"wrote {path}", file=sys.stderr)
    return 0


@dataclasses.dataclass(frozen=True, slots=True)
class _Tuning:
    """One baseline's selection: where and on which seeds, the choice and the ranking."""

    policy: str
    points: tuple[tuple[str, int], ...]
    seeds: list[int]
    chosen: CandidateScore
    ranked: list[CandidateScore]

    def to_dict(self) -> dict[str, Any]:
        return {"policy": self.policy, "rule": tuning.SELECTION_RULES[self.policy],
                "points": [list(p) for p in self.points], "seeds": self.seeds,
                "selected": self.chosen.to_dict()}


def _tune(args: argparse.Namespace, policy: str, points: tuple[tuple[str, int], ...],
          seeds: list[int], *, slots: Sequence[int] = DEFAULT_SLOTS,
          thresholds: Sequence[float] = tuning.SLACK_GATE_THRESHOLDS) -> _Tuning:
    """Run ``policy``'s candidate grid at ``points`` on ``seeds`` and select (App. C.4)."""
    from xinfer_ros.sim.runner import run_many

    grid = tuning.candidates(policy, slots, thresholds)
    keys = [(c, wl, n) for c in grid for wl, n in points]
    configs = [_config(args, policy, n, s, workload=wl, policy_kwargs=c.kwargs)
               for c, wl, n in keys for s in seeds]
    results = run_many(configs, args.workers, progress=not args.quiet, desc=f"tune {policy}")
    per_key: dict[tuple[Any, str, int], list[Any]] = {k: [] for k in keys}
    for i, res in enumerate(results):
        per_key[keys[i // len(seeds)]].append(res.metrics)
    scores = tuning.score_candidates(per_key)
    ranked = sorted(scores, key=lambda s: (-s.attainment, s.latency_ms))
    return _Tuning(policy, points, seeds, tuning.select(policy, scores), ranked)


def _cmd_tune(args: argparse.Namespace) -> int:
    from xinfer_ros.sim.runner import round_seeds

    thresholds = (tuning.SLACK_GATE_THRESHOLDS if args.thresholds is None
                  else tuple(t / 1000.0 for t in args.thresholds))
    result = _tune(args, args.policy, args.points, round_seeds(args.seed, args.rounds),
                   slots=args.slots,
                   thresholds=thresholds)
    point_keys = [f"{wl}/{n}" for wl, n in result.points]
    shown = result.ranked[:max(1, args.top)]
    if result.chosen not in shown:
        shown.append(result.chosen)
    rows = [[s.candidate.label(), _fmt(s.attainment * 100, ".2f"), _fmt(s.latency_ms),
             *(" ".join(f"{a * 100:.1f}" for a in s.rounds[k]) for k in point_keys),
             "<-" if s is result.chosen else ""] for s in shown]
    print(f"{args.policy}: {len(result.ranked)} candidates x {', '.join(point_keys)} x "
          f"{args.rounds} rounds (seeds {result.seeds[0]}-{result.seeds[-1]}); "
          f"rule: {tuning.SELECTION_RULES[args.policy]}")
    print(_table(rows, ["candidate", "att%", "lat ms", *(f"{k} rounds" for k in point_keys),
                        ""]))
    print(f"selected: {result.chosen.candidate.label()}")
    _write_json(args, "tune", {
        "command": "tune", **result.to_dict(), "rounds": args.rounds,
        "candidates": [s.to_dict() for s in result.ranked],
    })
    return 0


def _tune_baselines(args: argparse.Namespace, policies: Sequence[str]) -> list[_Tuning]:
    """Tune each baseline among ``policies`` on the compared workload (``--tune-baselines``).

    Sets ``args.tuned`` (policy -> constructor arguments) for :func:`_config`. The
    tuning runs on the comparison's GPU (its calibrated error) but on its own seeds.
    """
    from xinfer_ros.sim.runner import round_seeds

    seeds = round_seeds(args.tune_seed, args.rounds)
    results = [_tune(args, p, args.points, seeds)
               for p in policies if p in tuning.TUNED_POLICIES]
    args.tuned = {r.policy: r.chosen.candidate.kwargs for r in results}
    for r in results:
        print(f"{r.policy} tuned on {r.points[0][0]}/{r.points[0][1]} (seeds {seeds[0]}-"
              f"{seeds[-1]}, {len(r.ranked)} candidates): {r.chosen.candidate.label()}, "
              f"{r.chosen.attainment * 100:.2f} % at {r.chosen.latency_ms:.1f} ms", flush=True)
    return results


def _cmd_plan(args: argparse.Namespace) -> int:
    from xinfer_ros.sim.runner import round_seeds, run_many
    from xinfer_ros.sim.sizing import plan_site

    if args.robots < 1:
        raise SystemExit("--robots must be >= 1")
    crit = _criterion(args)
    seeds = round_seeds(args.seed, args.rounds)
    summaries: dict[int, RoundSummary] = {}

    maes: dict[int, float] = {}
    band = _engine_band(args, crit) if args.engine_check else None
    simulated: dict[int, list[Any]] = {}

    def evaluate(n: int) -> list[Any]:
        if n not in simulated:  # the band's plan walks the same counts again
            results = run_many([_config(args, args.policy, n, s) for s in seeds],
                               args.workers, progress=not args.quiet,
                               desc=f"{args.policy} x{n}")
            summaries[n] = summarize_rounds([r.metrics for r in results])
            maes[n] = _mae_ms(results)
            simulated[n] = [r.metrics for r in results]
        return simulated[n]

    plan = plan_site(args.robots, evaluate, crit, lo=min(args.search), hi=max(args.search),
                     patience=args.patience)
    banded = None if band is None else plan_site(
        args.robots, evaluate, crit, lo=min(args.search), hi=max(args.search),
        patience=args.patience, target=band.target(ATTAINMENT_TARGET))
    rows = [_summary_row([str(n)], summaries[n], v) for n, v in sorted(plan.verdicts.items())]
    print(f"{args.policy} on {args.workload} ({args.rate_table or 'shipped rate table'}), "
          f"criterion {crit.value}, {args.rounds} rounds per count")
    print(_table(rows, _header(["robots"])))
    if args.audit:
        print("running-stage prediction MAE (ms): " + ", ".join(
            f"x{n} {m:.2f}" for n, m in sorted(maes.items())))
    if plan.servers is None:
        print(f"no plan: one server's ERC is {plan.erc}"
              + ("" if plan.erc else f" (no count in {min(args.search)}-{max(args.search)} "
                 "passes)") + "; a faster table or a looser budget is needed")
    else:
        print(f"ERC of one server: {plan.erc}; {args.robots} robots need {plan.servers} "
              f"server(s), robots per server {list(plan.shares)} (every share passed)")
    if band is not None and banded is not None:
        _print_band(args, band, banded)
    _write_json(args, "plan", {
        "command": "plan", "policy": args.policy, "workload": args.workload,
        "rate_table": args.rate_table, "robots": args.robots, "criterion": crit.value,
        "erc": plan.erc, "servers": plan.servers, "shares": list(plan.shares),
        "verdicts": {str(n): v for n, v in sorted(plan.verdicts.items())},
        "summaries": {str(n): s.to_dict() for n, s in sorted(summaries.items())},
        "prediction_mae_ms": {str(n): m for n, m in sorted(maes.items()) if args.audit},
        "engine_band": None if band is None or banded is None else {
            **band.to_dict(), "simulated_target": band.target(ATTAINMENT_TARGET),
            "erc": banded.erc, "servers": banded.servers, "shares": list(banded.shares)}})
    return 0 if plan.servers is not None else 1


def _engine_band(args: argparse.Namespace, crit: Criterion) -> EngineBand:
    """The simulator's measured error on the plan's setting (``--engine-check``)."""
    from xinfer_ros.core.policy import parse_slots
    from xinfer_ros.core.rate_table import resolve_rate_table
    from xinfer_ros.sim.engine_band import EngineBandError, PlanSetting, load_band

    if crit is not Criterion.ATTAINMENT:
        raise SystemExit("error: --engine-check bounds attainment; this plan's criterion is "
                         f"{crit.value}")
    setting = PlanSetting(
        policy=args.policy, workload=args.workload,
        provenance=resolve_rate_table(args.rate_table).provenance,
        slots=parse_slots(args.slots), max_batch=args.max_batch,
        phase_spread=bool(args.phase_spread))
    try:
        return load_band(args.engine_check, setting)
    except EngineBandError as exc:
        raise SystemExit(f"error: --engine-check {exc}") from None


def _print_band(args: argparse.Namespace, band: EngineBand, banded: SitePlan) -> None:
    """The simulator's measured error and the plan that holds at its worse end."""
    print(f"simulator against the engine on this setting ({len(band.checks)} run(s) at "
          f"{', '.join(str(n) for n in band.robots)} robots): engine minus simulator "
          f"attainment {100 * band.low:+.1f} to {100 * band.high:+.1f} points")
    need = band.target(ATTAINMENT_TARGET)
    if banded.servers is None:
        print(f"at the band's worse end (simulated attainment >= {need:.3f}): no plan"
              + (" (no simulated run can reach it)" if need > 1.0 else
                 f"; one server's ERC is {banded.erc}"))
    else:
        print(f"at the band's worse end (simulated attainment >= {need:.3f}): ERC "
              f"{banded.erc}; {args.robots} robots need {banded.servers} server(s), robots "
              f"per server {list(banded.shares)}")


_COMMANDS = {"run": _cmd_run, "erc": _cmd_erc, "compare": _cmd_compare, "project": _cmd_project,
             "tune": _cmd_tune, "plan": _cmd_plan}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``xinfer-sim``; returns the exit status."""
    args = build_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    if args.rounds < 1:
        raise SystemExit("--rounds must be >= 1")
    if not args.duration > args.warmup:
        raise SystemExit("--duration must exceed --warmup")
    args.audit, args.rate_error, args.calibration = False, 0.0, None
    _check_rate_table(args)
    _check_tuning(args)  # before a calibration spends time on a run that cannot start
    if getattr(args, "predictor_error_ms", None) is not None:
        _apply_prediction_error(args)
    return _COMMANDS[args.command](args)


def _check_rate_table(args: argparse.Namespace) -> None:
    """Refuse a missing or malformed ``--rate-table`` in one line, before any run."""
    from xinfer_ros.core.errors import RateTableError
    from xinfer_ros.core.rate_table import resolve_rate_table

    if getattr(args, "rate_table", None) is None:
        return
    try:
        resolve_rate_table(args.rate_table)
    except RateTableError as exc:
        raise SystemExit(f"error: --rate-table: {exc}") from None


def _check_tuning(args: argparse.Namespace) -> None:
    """Refuse tuning flags that would be ignored, and tuning seeds a comparison uses.

    Sets ``args.points``, the (workload, robots) points a ``tune`` or a ``compare
    --tune-baselines`` selects on.
    """
    from xinfer_ros.sim.runner import round_seeds

    if args.command == "tune":
        if args.robots is not None and args.workload is None:
            raise SystemExit("error: tune --robots sets the --workload point; give --workload")
        try:
            args.points = tuning.tuning_points(args.policy, args.workload, args.robots)
        except ValueError as exc:
            raise SystemExit(f"error: {exc}") from None
    elif args.command == "compare":
        if not args.tune_baselines:
            if args.tune_robots is not None or args.tune_seed is not None:
                raise SystemExit("error: --tune-robots and --tune-seed need --tune-baselines")
            return
        if args.tune_seed is None:
            args.tune_seed = tuning.TUNING_SEED
        if set(round_seeds(args.tune_seed, args.rounds)) & set(round_seeds(args.seed,
                                                                          args.rounds)):
            raise SystemExit(f"error: --tune-seed {args.tune_seed} gives the comparison's "
                             f"own seeds (--seed {args.seed}); pick another")
        try:
            args.points = (tuning.workload_point(args.workload, args.tune_robots),)
        except ValueError as exc:
            raise SystemExit(f"error: --tune-baselines: {exc}") from None


def _apply_prediction_error(args: argparse.Namespace) -> None:
    """Set the error model's sigmas from ``--predictor-error-ms`` (calibrated here).

    The error belongs to the GPU, not to a policy: every policy runs with the same
    sigmas. They are calibrated on XInfer's predictor when XInfer is among the policies
    (the paper reports its MAE), else on the first policy, at the run's robot count
    (the middle of a sweep) on the first seed; every run then reports its own MAE.
    ``tune`` calibrates on XInfer at its (first) tuning point and on its own seed, so
    its sigmas may differ a little from a comparison's; ``compare --tune-baselines``
    tunes on the comparison's own calibration.
    """
    from xinfer_ros.sim.prediction_error import PredictionErrorTargetError, calibrate
    from xinfer_ros.sim.runner import round_seeds

    seed = round_seeds(args.seed, 1)[0]
    if args.command == "tune":
        # The GPU is sized as for a comparison, on XInfer's predictor at the tuning
        # point; no candidate is ever scored against XInfer.
        workload, robots = args.points[0]
        cfg = _config(args, "xinfer", robots, seed, workload=workload)
    else:
        # plan's --robots is the fleet; one server runs the counts its search walks.
        walked = args.search if args.command == "plan" else args.robots
        counts = [walked] if isinstance(walked, int) else sorted(walked)
        policies = [p.strip() for p in args.policy.split(",") if p.strip()]
        policy = "xinfer" if "xinfer" in policies else policies[0]
        cfg = _config(args, policy, counts[len(counts) // 2], seed)
    try:
        calibration = calibrate(cfg, args.predictor_error_ms)
    except PredictionErrorTargetError as exc:
        raise SystemExit(f"error: --predictor-error-ms: {exc}") from None
    args.noise, args.rate_error, args.audit = calibration.noise, calibration.rate_error, True
    args.calibration = calibration
    print(calibration.describe(), flush=True)


def _mae_ms(results: Sequence[RunResult]) -> float:
    """Mean over rounds of the audited running-stage MAE (ms; NaN when not audited)."""
    values = [r.prediction["mae_ms"] for r in results
              if r.prediction is not None and "mae_ms" in r.prediction]
    return sum(values) / len(values) if values else math.nan


if __name__ == "__main__":
    sys.exit(main())
