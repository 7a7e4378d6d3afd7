"""Summary of the fast-path block, per arm and robot count.

Attainment, goodput, Action units per forward, shed requests, fast-path units, and the
simulator's gap (engine - simulator) on the table and on the run's learned factors.
Usage: python analyse.py DIR (the directory of the block's JSON files).
"""
import glob
import json
import statistics as st
import sys

root = sys.argv[1]
rows = {}
for f in sorted(glob.glob(f"{root}/r*_*.json")):
    with open(f) as fh:
        d = json.load(fh)
    r, arm, n = f.rsplit("/", 1)[1][:-5].split("_")
    m = d["metrics"]
    b = d["batches"]["action"]
    k = sum(b.values())
    sim = d.get("simulator") or {}
    on_tab = sim.get("metrics", {}).get("attainment")
    corr = (sim.get("corrected") or {}).get("metrics", {}).get("attainment")
    e = m["attainment"] * 100
    rows.setdefault((int(n), arm), []).append(dict(
        att=e, good=m["goodput_rps"], units=sum(int(x) * v for x, v in b.items()) / k,
        shed=d["statuses"].get("SHED", 0), fast=d["dispatcher"].get("fast_path_units"),
        gap_tab=None if on_tab is None else e - on_tab * 100,
        gap_corr=None if corr is None else e - corr * 100))
within_tab = within_corr = total = 0
for (n, arm), v in sorted(rows.items()):
    print(f"{n:>2} {arm:<4} att {st.median(x['att'] for x in v):5.1f} "
          f"good {st.median(x['good'] for x in v):5.2f} "
          f"units {min(x['units'] for x in v):.2f}-{max(x['units'] for x in v):.2f} "
          f"shed {[x['shed'] for x in v]} fast {[x['fast'] for x in v]} "
          f"gap tab {[round(x['gap_tab'], 1) for x in v if x['gap_tab'] is not None]} "
          f"corr {[round(x['gap_corr'], 1) for x in v if x['gap_corr'] is not None]}")
    for x in v:
        total += 1
        within_tab += x["gap_tab"] is not None and abs(x["gap_tab"]) <= 10
        within_corr += x["gap_corr"] is not None and abs(x["gap_corr"]) <= 10
print(f"within 10 points: table {within_tab}/{total}, learned factors {within_corr}/{total}")
