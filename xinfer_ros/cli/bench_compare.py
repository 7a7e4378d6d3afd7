"""``xinfer-bench compare``: arms of benchmark runs compared at one host speed.

Reads the JSON reports of single ``xinfer-bench engine`` runs or ``xinfer-fleet`` runs
(each written with ``--json``; the arm is the report's ``arm``, set with ``--arm``; a
``--pairs`` file is not one of them; a fleet's figures are its ``total``),
groups them by workload and robot count, and fits each group's runs with one level
per arm and one slope on the speed probe (:mod:`xinfer_ros.engine.speed_adjust`).
Prints each arm's mean probe time, raw median and figure at the runs' mean speed, the
raw and residual spread, and, with ``--candidate``, whether the candidate is within
``--tolerance`` of the best other arm.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path

from xinfer_ros.cli.fleet_report import FLEET_BENCHMARK
from xinfer_ros.engine.speed_adjust import (
    INTERVAL_SE,
    ArmRun,
    SpeedAdjustError,
    SpeedFit,
    fit_common_slope,
    interval_verdict,
)
from xinfer_ros.engine.speed_probe import PROBES
from xinfer_ros.errors import XInferRosError

__all__ = ["DEFAULT_TOLERANCE", "FIGURES", "ReportError", "add_arguments", "load_runs", "run"]

#: Figures a report carries in ``metrics``, and the factor that puts them in print units.
FIGURES: dict[str, float] = {"attainment": 100.0, "goodput_rps": 1.0, "throughput_rps": 1.0}

#: Where each kind of report (its ``benchmark`` key) keeps its figures and robot count:
#: ``xinfer-bench engine``'s and ``xinfer-fleet``'s.
_FIGURES_AT: dict[str, tuple[str, str]] = {"engine": ("metrics", "robots"),
                                           FLEET_BENCHMARK: ("total", "robots_count")}

#: Points of attainment a candidate may fall below the best other arm (issue 28).
DEFAULT_TOLERANCE = 2.0

#: A group of runs: (workload, robots).
Group = tuple[str, int]


class ReportError(XInferRosError, ValueError):
    """A file is not an engine or fleet report the comparison can use (the message names it)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the ``compare`` sub-command's options."""
    parser.add_argument("reports", type=Path, nargs="+", metavar="REPORT",
                        help="JSON reports of xinfer-bench engine or xinfer-fleet runs")
    parser.add_argument("--figure", choices=sorted(FIGURES), default="attainment")
    parser.add_argument("--probe", choices=PROBES, default=PROBES[0],
                        help="the speed probe's work unit the runs are adjusted by")
    parser.add_argument("--candidate", default=None, metavar="ARM",
                        help="the arm judged against the best other arm at each count")
    parser.add_argument("--tolerance", type=float, default=DEFAULT_TOLERANCE,
                        help="the candidate holds when at most this far below (figure units)")


def load_runs(paths: Sequence[Path], figure: str, probe_name: str = PROBES[0]
              ) -> dict[Group, list[ArmRun]]:
    """Runs by workload and robot count.

    Args:
        paths: JSON reports of ``xinfer-bench engine`` or ``xinfer-fleet`` runs.
        figure: the figure compared (a key of :data:`FIGURES`).
        probe_name: the speed probe's work unit the runs are adjusted by.

    Returns:
        Each (workload, robots) group's runs.

    Raises:
        ReportError: unreadable, not an engine or fleet report, no arm, no speed probe, or a
            figure or probe time missing or not a finite number.
    """
    scale = FIGURES[figure]
    by_group: dict[Group, list[ArmRun]] = {}
    for path in paths:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ReportError(f"{path}: cannot read a JSON report ({exc})") from None
        kind = data.get("benchmark") if isinstance(data, dict) else None
        if kind not in _FIGURES_AT:
            raise ReportError(f"{path}: not an xinfer-bench engine or xinfer-fleet report")
        if not data.get("arm"):
            raise ReportError(f"{path}: the report names no arm (run it with --arm LABEL)")
        probe = data.get("speed_probe")
        if not isinstance(probe, dict) or probe_name not in probe:
            raise ReportError(f"{path}: the report has no {probe_name} speed probe (run "
                              "without --no-speed-probe)")
        try:
            metrics_key, robots_key = _FIGURES_AT[str(kind)]
            group = (str(data["workload"]), int(data[robots_key]))
            value = float(data[metrics_key][figure]) * scale
            probe_ms = float(probe[probe_name]["median_ms"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ReportError(f"{path}: the report lacks workload, robot count, "
                              f"{figure} or the probe's median ({exc!r})") from None
        if not (math.isfinite(value) and math.isfinite(probe_ms)):
            raise ReportError(f"{path}: {figure} or the probe's median is not a finite number")
        by_group.setdefault(group, []).append(ArmRun(arm=str(data["arm"]), value=value,
                                                     probe_ms=probe_ms))
    return by_group


def _print_fit(group: Group, fit: SpeedFit, candidate: str | None, tolerance: float) -> None:
    workload, robots = group
    print(f"{workload}, {robots} robots: {sum(a.runs for a in fit.arms)} runs, compared "
          f"at probe {fit.probe_ms:.3f} ms; slope {fit.slope:+.1f} +- {fit.slope_se:.1f} "
          "per log-unit; "
          f"spread raw {fit.raw_sd:.2f} -> residual {fit.residual_sd:.2f} ({fit.dof} dof)")
    for a in fit.arms:
        print(f"  {a.arm:<16} runs {a.runs:>2}  probe {a.probe_ms:.3f} ms  raw median "
              f"{a.raw_median:7.2f}  at common speed {a.adjusted:7.2f} +- {a.se:.2f}")
    if candidate is None:
        return
    names = {a.arm for a in fit.arms}
    if candidate not in names or len(names) < 2:
        print(f"  no verdict: {candidate} and another arm need runs at this count")
        return
    best = max((a for a in fit.arms if a.arm != candidate), key=lambda a: a.adjusted)
    print(f"  {candidate} - {best.arm} = {_verdict(fit, candidate, best.arm, tolerance)}")


def _verdict(fit: SpeedFit, arm: str, other: str, tolerance: float) -> str:
    """``arm - other`` with its interval, and its :func:`interval_verdict`."""
    diff, se = fit.difference(arm, other)
    lo, hi = diff - INTERVAL_SE * se, diff + INTERVAL_SE * se
    return (f"{diff:+.2f} +- {se:.2f} ({INTERVAL_SE:g} SE: {lo:+.2f} .. {hi:+.2f}); "
            f"tolerance -{tolerance:g}: {interval_verdict(diff, se, tolerance)}")


def run(args: argparse.Namespace) -> int:
    """Entry point of ``xinfer-bench compare``."""
    try:
        by_group = load_runs(args.reports, args.figure, args.probe)
        if args.candidate is not None and not any(
                r.arm == args.candidate for runs in by_group.values() for r in runs):
            raise SpeedAdjustError(f"no runs of arm {args.candidate!r}")
        for group in sorted(by_group):
            try:
                fit = fit_common_slope(by_group[group])
            except SpeedAdjustError as exc:
                raise SpeedAdjustError(f"{group[0]}, {group[1]} robots: {exc}") from None
            _print_fit(group, fit, args.candidate, args.tolerance)
    except (ReportError, SpeedAdjustError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0
