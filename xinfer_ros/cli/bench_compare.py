"""``xinfer-bench compare``: arms of ``xinfer-bench engine`` runs compared at one host speed.

Reads the JSON reports of engine runs (each written with ``--json``; the arm is the
report's ``arm``, set with ``--arm``), groups them by robot count, and fits each
count's runs with one level per arm and one slope on the speed probe
(:mod:`xinfer_ros.engine.speed_adjust`). Prints each arm's raw median and its figure
at the runs' mean speed, the raw and residual spread, and, with ``--candidate``,
whether the candidate is within ``--tolerance`` of the best other arm.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from xinfer_ros.engine.speed_adjust import ArmRun, SpeedAdjustError, SpeedFit, fit_common_slope
from xinfer_ros.engine.speed_probe import PROBES
from xinfer_ros.errors import XInferRosError

__all__ = ["FIGURES", "add_arguments", "load_runs", "run"]

#: Figures a report carries in ``metrics``, and the factor that puts them in print units.
FIGURES: dict[str, float] = {"attainment": 100.0, "goodput_rps": 1.0, "throughput_rps": 1.0}


class ReportError(XInferRosError, ValueError):
    """A file is not an engine report the comparison can use (the message names it)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the ``compare`` sub-command's options."""
    parser.add_argument("reports", type=Path, nargs="+", metavar="REPORT",
                        help="JSON reports of xinfer-bench engine runs")
    parser.add_argument("--figure", choices=sorted(FIGURES), default="attainment")
    parser.add_argument("--probe", choices=PROBES, default=PROBES[0],
                        help="the speed probe's work unit the runs are adjusted by")
    parser.add_argument("--candidate", default=None, metavar="ARM",
                        help="the arm judged against the best other arm at each count")
    parser.add_argument("--tolerance", type=float, default=2.0,
                        help="the candidate holds when at most this far below (figure units)")


def load_runs(paths: Sequence[Path], figure: str, probe_name: str = PROBES[0]
              ) -> dict[int, list[ArmRun]]:
    """Runs by robot count.

    Raises:
        ReportError: unreadable, not an engine report, no arm, or no speed probe.
    """
    scale = FIGURES[figure]
    by_count: dict[int, list[ArmRun]] = {}
    for path in paths:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ReportError(f"{path}: cannot read a JSON report ({exc})") from None
        if not isinstance(data, dict) or data.get("benchmark") != "engine":
            raise ReportError(f"{path}: not an xinfer-bench engine report")
        if not data.get("arm"):
            raise ReportError(f"{path}: the report names no arm (run it with --arm LABEL)")
        probe = data.get("speed_probe")
        if not isinstance(probe, dict) or probe_name not in probe:
            raise ReportError(f"{path}: the report has no {probe_name} speed probe (run "
                              "without --no-speed-probe)")
        by_count.setdefault(int(data["robots"]), []).append(ArmRun(
            arm=str(data["arm"]), value=float(data["metrics"][figure]) * scale,
            probe_ms=float(probe[probe_name]["median_ms"])))
    return by_count


def _print_fit(robots: int, fit: SpeedFit, candidate: str | None, tolerance: float) -> None:
    print(f"{robots} robots: {sum(a.runs for a in fit.arms)} runs, compared at probe "
          f"{fit.probe_ms:.3f} ms; slope {fit.slope:+.1f} +- {fit.slope_se:.1f} per log-unit; "
          f"spread raw {fit.raw_sd:.2f} -> residual {fit.residual_sd:.2f} ({fit.dof} dof)")
    for a in fit.arms:
        print(f"  {a.arm:<16} runs {a.runs:>2}  raw median {a.raw_median:7.2f}  "
              f"at common speed {a.adjusted:7.2f} +- {a.se:.2f}")
    if candidate is None:
        return
    others = [a for a in fit.arms if a.arm != candidate]
    if not others:
        return
    best = max(others, key=lambda a: a.adjusted)
    diff, se = fit.difference(candidate, best.arm)
    lo, hi = diff - 2 * se, diff + 2 * se
    if lo >= -tolerance:
        verdict = "holds"
    elif hi < -tolerance:
        verdict = "fails"
    else:
        verdict = "holds" if diff >= -tolerance else "short"
        verdict += ", undecided at 2 SE"
    print(f"  {candidate} - {best.arm} = {diff:+.2f} +- {se:.2f} "
          f"(2 SE: {lo:+.2f} .. {hi:+.2f}); tolerance -{tolerance:g}: {verdict}")


def run(args: argparse.Namespace) -> int:
    """Entry point of ``xinfer-bench compare``."""
    try:
        by_count = load_runs(args.reports, args.figure, args.probe)
        for robots in sorted(by_count):
            fit = fit_common_slope(by_count[robots])
            if args.candidate is not None:
                fit.arm(args.candidate)
            _print_fit(robots, fit, args.candidate, args.tolerance)
    except (ReportError, SpeedAdjustError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0
