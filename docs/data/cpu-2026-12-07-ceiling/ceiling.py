"""How far can batching lift goodput at 12 robots on phases, round by round?

Issue 28 asks for goodput >= 1.5x unbatched XInfer's at 12 robots. Goodput counts only
answers in budget, so no arm can exceed its own answer rate (throughput_rps, on time or
late). This reads every committed `xinfer-bench engine` report under docs/data (on the
CPU, phases, 12 robots), pairs each round's unbatched XInfer run (policy xinfer,
max_batch 1) with the batched runs of the same folder and round, and prints unbatched
goodput, each batched run's goodput and answer rate, and two ceilings on the ratio:

* answered / unb: the batched run's answers per second, every one counted as on time,
  over unbatched goodput (the most that run's own batches could have given);
* offered / unb: every robot's request answered on time at the send period (12 / T_E),
  over unbatched goodput (no server does better in this closed loop).

Usage: python docs/data/cpu-2026-12-07-ceiling/ceiling.py [DATA_DIR]
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from xinfer_ros.core.constants import SEND_PERIOD

DATA = Path(__file__).resolve().parents[1]
ROBOTS = 12
BAR = 1.5
#: The shipped saturation switch's policy name.
SWITCH = "xinfer_batch_switch"


@dataclass(frozen=True)
class Run:
    """One engine report."""

    arm: str  # the bench's arm label
    policy: str
    goodput: float  # on-time answers a second
    answers: float  # OK answers a second, on time or late (throughput_rps)


@dataclass
class Round:
    """The runs of one round of one folder: unbatched XInfer and the batched arms."""

    folder: str
    name: str
    spread: bool
    unbatched: Run | None = None
    batched: list[Run] | None = None


def read_rounds(data: Path) -> list[Round]:
    """Every round under ``data`` with an unbatched XInfer run and a batched one."""
    rounds: dict[tuple[str, str], Round] = {}
    for path in sorted(data.rglob("*.json")):
        try:
            report = json.loads(path.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError):
            continue
        if not (isinstance(report, dict) and report.get("benchmark") == "engine"
                and report.get("workload") == "phases" and report.get("robots") == ROBOTS
                and not report.get("emulated")):
            continue
        match = re.search(r"(?:^|_)r(\d+)(?:_|$)", path.stem)
        if match is None:
            continue
        folder = str(path.parent.relative_to(data))
        key = (folder, f"r{match.group(1)}")
        rnd = rounds.setdefault(key, Round(folder, key[1], bool(report.get("phase_spread")),
                                           batched=[]))
        metrics = report["metrics"]
        run = Run(str(report.get("arm")), report["policy"], metrics["goodput_rps"],
                  metrics["throughput_rps"])
        if report["config"]["max_batch"] == 1 and report["policy"] == "xinfer":
            rnd.unbatched = run
        elif report["config"]["max_batch"] > 1:
            assert rnd.batched is not None
            rnd.batched.append(run)
    return [r for r in rounds.values() if r.unbatched is not None and r.batched]


def span(values: list[float]) -> str:
    """``min-max`` of ``values``."""
    return f"{min(values):.2f}-{max(values):.2f}"


def print_rounds(rounds: list[Round], offered: float) -> None:
    """One line per batched run: goodput, answers, and both ceilings."""
    print(f"{'folder':32s} {'round':5s} {'spread':6s} {'unb gp':>6s}  {'arm':6s} "
          f"{'gp':>5s} {'answ':>5s} {'gp/unb':>6s} {'answ/unb':>8s} {'offered/unb':>11s}")
    for rnd in rounds:
        assert rnd.unbatched is not None and rnd.batched is not None
        base = rnd.unbatched.goodput
        for run in sorted(rnd.batched, key=lambda r: r.arm):
            print(f"{rnd.folder:32s} {rnd.name:5s} {'on' if rnd.spread else 'off':6s} "
                  f"{base:6.1f}  {run.arm:6s} {run.goodput:5.1f} {run.answers:5.1f} "
                  f"{run.goodput / base:6.2f} {run.answers / base:8.2f} "
                  f"{offered / base:11.2f}")


def print_summary(rounds: list[Round], offered: float) -> None:
    """Ranges and counts by phase spreading."""
    print(f"\nby phase spreading (a round reaches {BAR}x answered when its best batched "
          f"run answered {BAR}x unbatched goodput, late answers included: a necessary "
          f"condition for the figure)")
    for spread in (True, False):
        group = [r for r in rounds if r.spread == spread]
        if not group:
            continue
        bases = [r.unbatched.goodput for r in group if r.unbatched is not None]
        runs = [(r.unbatched.goodput, run) for r in group if r.unbatched is not None
                for run in r.batched or []]
        best = [max(run.answers for run in r.batched or []) / r.unbatched.goodput
                for r in group if r.unbatched is not None]
        switch = [(b, run) for b, run in runs if run.policy == SWITCH]
        print(f"  spreading {'on' if spread else 'off'}: {len(group)} rounds in "
              f"{len({r.folder for r in group})} folders; unb goodput {span(bases)}; "
              f"batched answers/s {span([run.answers for _, run in runs])}; "
              f"best answered/unb {span(best)}, >= {BAR}x in "
              f"{sum(x >= BAR for x in best)} of {len(group)}; offered/unb "
              f"{span([offered / b for b in bases])}")
        if switch:
            ratios = [run.goodput / b for b, run in switch]
            print(f"    the switch ({SWITCH}): {len(switch)} runs, goodput/unb "
                  f"{span(ratios)}, >= {BAR}x in {sum(x >= BAR for x in ratios)}")
        other = [run.goodput / b for b, run in runs if run.policy != SWITCH]
        if other:
            print(f"    other batched arms: {len(other)} runs, goodput/unb {span(other)}, "
                  f">= {BAR}x in {sum(x >= BAR for x in other)}")


def main(data: Path) -> None:
    """Print the runs and the summary of every round under ``data``."""
    offered = ROBOTS / SEND_PERIOD
    print(f"offered at full service: {ROBOTS} robots / T_E {SEND_PERIOD * 1e3:.0f} ms "
          f"= {offered:.1f} requests/s")
    rounds = sorted(read_rounds(data), key=lambda r: (not r.spread, r.folder, r.name))
    print_rounds(rounds, offered)
    print_summary(rounds, offered)


if __name__ == "__main__":
    main(Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else DATA)
