"""Simulator against engine over a block's runs (--compare-sim): how many within 10 points.

Usage: python sim_gap.py DIR. 'As calibrated': the simulator on the run's table;
'learned slowdown': on the table with the run's learned rate-correction factors.
"""
import glob
import json
import statistics as st
import sys

gaps = {"as calibrated": [], "learned slowdown": []}
for f in sorted(glob.glob(f"{sys.argv[1]}/r*_*.json")):
    with open(f) as fh:
        d = json.load(fh)
    eng, sim = d["metrics"]["attainment"] * 100, d["simulator"]
    gaps["as calibrated"].append(eng - sim["metrics"]["attainment"] * 100)
    fix = sim.get("corrected")
    if fix is not None:
        gaps["learned slowdown"].append(eng - fix["metrics"]["attainment"] * 100)
for name, g in gaps.items():
    if g:
        print(f"{name}: {sum(abs(x) <= 10 for x in g)} of {len(g)} runs within 10 points; "
              f"median |gap| {st.median(abs(x) for x in g):.1f}; "
              f"range {min(g):+.1f} .. {max(g):+.1f}")
