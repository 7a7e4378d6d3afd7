"""The interleaved block in one table: each point's arms and the switch against the better.

For each report in a folder (block.sh's), the pooled attainment of each arm, and auto
(the switch on its meter) minus the better pinned arm (off: unbatched XInfer's launches,
on: lane batching's, by pooled attainment), cycle by cycle and at one host speed, each
with its 95 % half-width and verdict against -2 points; also on - off, the crossover.
Usage (from the repository root): python docs/data/cpu-2026-12-06-interleave/summary.py DIR
"""
import json
import pathlib
import sys


def pair(diffs, a, b, key_a="arm", key_b="other"):
    """The difference ``a - b`` among ``diffs``, or None."""
    for d in diffs:
        if (d[key_a], d[key_b]) == (a, b):
            return d
    return None


for path in sorted(pathlib.Path(sys.argv[1]).glob("*.json")):
    rep = json.loads(path.read_text())
    il = rep["interleave"]
    arms = {a["arm"]: a for a in il["arms"]}
    line = f"{path.stem:12s} " + " ".join(
        f"{k} {a['attainment'] * 100:5.1f}%" for k, a in arms.items())
    fit = il.get("speed_fit") or {}
    if "auto" in arms:
        better = max(("off", "on"), key=lambda k: arms[k]["attainment"])
        c = pair(il["differences"], "auto", better)
        f = pair(fit.get("differences", []), "auto", better)
        line += (f" | auto-{better} {c['mean']:+5.1f}+-{c['half_width']:4.1f} {c['verdict']:18s}")
        if f is not None:
            line += f" | one speed {f['difference']:+5.1f}+-{f['half_width']:4.1f} {f['verdict']}"
        c = pair(il["differences"], "on", "off")
        line += f" | on-off {c['mean']:+5.1f}"
    else:
        (c,) = il["differences"]
        line += f" | {c['arm']}-{c['other']} {c['mean']:+5.1f}+-{c['half_width']:4.1f}"
        if fit.get("differences"):
            f = fit["differences"][0]
            line += f" | one speed {f['difference']:+5.1f}+-{f['half_width']:4.1f}"
    if fit:
        line += f" | spread {fit['raw_sd']:.1f}->{fit['residual_sd']:.1f}"
    sat = rep.get("saturation") or {}
    line += f" | meter saturated {sat.get('saturated_share', float('nan')):.0%}"
    print(line)
