"""Where lane batching overtakes unbatched XInfer: every paired block in docs/data.

For each block folder that ran both arms (unb: xinfer on slots 1,1,2; lane: xinfer on
4,4,8 with max_batch 4) at the same point, the median attainment of each over its
rounds, and unbatched serving's Action utilisation there: requests sent per second in
the window times unb's mean Action unit time, over its two Action lanes (medians over
the rounds). Sorted by that utilisation, with the count of points where lane batching
kept fewer requests below 0.92 and at least as many at or above it: the band of
``core.saturation.SaturationSettings``.
The band was fitted on the folders of 2026-12-02 to 2026-12-05 (18 of 26 below, 28 of
33 at or above); later folders, some with phase spreading or the compiled Action loop,
join with --all. --spread keeps only runs with phase spreading (config/fleet.yaml's
setting), from every folder.
Usage (from the repository root):
    python docs/data/cpu-2026-12-06-switch/crossover.py [--all | --spread]
"""
import collections
import glob
import json
import os
import statistics as st
import sys

FITTED_BEFORE = "cpu-2026-12-06"  # folders at or after this name came after the fit
SPREAD = "--spread" in sys.argv

runs = collections.defaultdict(dict)
for f in glob.glob("docs/data/cpu-*/**/*.json", recursive=True):
    if not ("--all" in sys.argv or SPREAD) and f.split("/")[2] >= FITTED_BEFORE:
        continue
    try:
        with open(f) as fh:
            d = json.load(fh)
    except (OSError, ValueError):
        continue
    if not isinstance(d, dict) or d.get("policy") != "xinfer" or "metrics" not in d:
        continue
    if SPREAD and not d.get("phase_spread"):
        continue
    c = d["config"]
    shape = (c.get("max_batch", 1), tuple(c.get("slots", ())), c.get("lazy_slots", "off"))
    arm = {(1, (1, 1, 2), "off"): "unb", (4, (4, 4, 8), "off"): "lane"}.get(shape)
    if arm is None:
        continue
    w = d["window_s"]
    span = w[1] - w[0] if isinstance(w, list) else w
    # The round: r1_unb_phases8.json, or p8_r1_unb.json (the shipped block's names).
    parts = os.path.basename(f).split("_")
    rnd = next((p for p in parts if p[:1] == "r" and p[1:].isdigit()), parts[0])
    key = (os.path.dirname(f).removeprefix("docs/data/"), d["workload"], d["robots"], rnd)
    runs[key][arm] = (d["metrics"]["attainment"] * 100, d["metrics"]["requests"] / span,
                      d["stage_ms"]["action"]["mean"])
points = collections.defaultdict(list)
for (block, workload, robots, _), arms in runs.items():
    if "unb" in arms and "lane" in arms:
        points[(block, workload, robots)].append((arms["unb"], arms["lane"]))
rows = []
for (block, workload, robots), pairs in points.items():
    unb = st.median(u[0] for u, _ in pairs)
    lane = st.median(la[0] for _, la in pairs)
    rho = st.median(u[1] for u, _ in pairs) * st.median(u[2] for u, _ in pairs) / 1000 / 2
    rows.append((rho, workload, robots, block, len(pairs), unb, lane))
below = above = lane_below = lane_above = 0
for rho, workload, robots, block, n, unb, lane in sorted(rows):
    print(f"rho_A {rho:4.2f}  {workload:6s} {robots:2d}  {block:38s} rounds {n}  "
          f"unb {unb:5.1f}  lane {lane:5.1f}  lane - unb {lane - unb:+5.1f}")
    if rho < 0.92:
        below += 1
        lane_below += lane < unb
    else:
        above += 1
        lane_above += lane >= unb
print(f"below 0.92: lane < unb at {lane_below} of {below}; "
      f"at or above: lane >= unb at {lane_above} of {above}")
