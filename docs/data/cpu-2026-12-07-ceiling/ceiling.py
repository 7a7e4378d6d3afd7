"""How far can batching lift goodput at 12 robots on phases, round by round?

Issue 28 asks for goodput >= 1.5x unbatched XInfer's at 12 robots. Goodput counts only
answers in budget, so no arm can exceed its own answer rate (throughput_rps, on time or
late). For every committed 12-robot phases round that ran unbatched XInfer beside a
batched arm, this prints unbatched goodput, each batched arm's goodput and throughput,
and two ceilings on the ratio:

* answered / unb: the batched arm's answers per second, all of them counted as on time,
  over unbatched goodput (the most that arm's own batches could have given);
* offered / unb: every robot's request answered on time at the send period (12 / T_E),
  over unbatched goodput (no server can do better in this closed loop).

Usage: python docs/data/cpu-2026-12-07-ceiling/ceiling.py [DIR ...]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from xinfer_ros.core.constants import SEND_PERIOD

ROOT = Path(__file__).resolve().parents[1]
ROBOTS = 12


def rounds(directory: Path) -> dict[str, dict[str, dict]]:
    """``{round: {arm: report}}`` of the directory's ``p12_rN_arm.json`` files."""
    out: dict[str, dict[str, dict]] = {}
    for path in sorted(directory.glob(f"p{ROBOTS}_r*_*.json")):
        _, rnd, arm = path.stem.split("_", 2)
        report = json.loads(path.read_text())
        if report.get("workload") == "phases" and report.get("robots") == ROBOTS:
            out.setdefault(rnd, {})[arm] = report
    return out


def span(values: list[float]) -> str:
    """``min-max`` of ``values``."""
    return f"{min(values):.2f}-{max(values):.2f}"


def main(dirs: list[Path]) -> None:
    """Print the round table and the summary by phase spreading."""
    offered = ROBOTS / SEND_PERIOD
    print(f"offered at full service: {ROBOTS} robots / T_E {SEND_PERIOD * 1e3:.0f} ms "
          f"= {offered:.1f} requests/s")
    print(f"{'directory':38s} {'round':5s} {'spread':6s} {'unb gp':>6s}  "
          f"{'arm':4s} {'gp':>5s} {'answ':>5s} {'gp/unb':>6s} {'answ/unb':>8s} "
          f"{'offered/unb':>11s}")
    summary: dict[str, list[tuple[float, float, float, float]]] = {"on": [], "off": []}
    for directory in dirs:
        for rnd, arms in rounds(directory).items():
            unb = arms.get("unb")
            if unb is None:
                continue
            base = unb["metrics"]["goodput_rps"]
            spread = "on" if unb.get("phase_spread") else "off"
            best = 0.0
            answers = []
            for arm, report in sorted(arms.items()):
                if arm == "unb":
                    continue
                m = report["metrics"]
                best = max(best, m["throughput_rps"] / base)
                answers.append(m["throughput_rps"])
                print(f"{directory.relative_to(ROOT)!s:38s} {rnd:5s} {spread:6s} "
                      f"{base:6.1f}  {arm:4s} {m['goodput_rps']:5.1f} "
                      f"{m['throughput_rps']:5.1f} {m['goodput_rps'] / base:6.2f} "
                      f"{m['throughput_rps'] / base:8.2f} {offered / base:11.2f}")
            summary[spread] += [(base, answer, best, offered / base) for answer in answers]
    print("\nby phase spreading: unbatched goodput, batched answers/s, the best batched "
          "arm's answers over unbatched goodput, offered over unbatched goodput, and the "
          "rounds where that best arm answered >= 1.5x (a necessary condition for the "
          "figure)")
    for spread, rows in summary.items():
        if not rows:
            continue
        per_round = sorted({(b, best, off) for b, _, best, off in rows})
        print(f"  spreading {spread}: {len(per_round)} rounds; unb goodput "
              f"{span([b for b, _, _ in per_round])}; "
              f"answers/s {span([a for _, a, _, _ in rows])}; "
              f"best answered/unb {span([x for _, x, _ in per_round])}; offered/unb "
              f"{span([o for _, _, o in per_round])}; >= 1.5x in "
              f"{sum(x >= 1.5 for _, x, _ in per_round)} of {len(per_round)}")


if __name__ == "__main__":
    args = [Path(a) for a in sys.argv[1:]]
    main([a.resolve() for a in args] or [
        ROOT / "cpu-2026-12-06-spread" / "ps1", ROOT / "cpu-2026-12-06-spread" / "ps4",
        ROOT / "cpu-2026-12-06-spread" / "band", ROOT / "cpu-2026-12-06-spread" / "nops12",
        ROOT / "cpu-2026-12-06-shipped", ROOT / "cpu-2026-12-06-tight" / "goodput",
        ROOT / "cpu-2026-12-06-compile" / "block"])
