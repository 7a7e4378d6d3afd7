"""How often would issue 28's engine figure pass for a policy as good as the better arm?

The figure: at each point, the candidate's median attainment over three runs is at least
the better arm's median (the larger of unbatched XInfer's and lane batching's, each over
three runs) minus 2 points, at all seven points (phases 2, 4, 6, 8, 12; parcel at two
counts). The noise of one run: every engine report under docs/data/cpu-*/ that ran one
command three times or more in one block, at a point where that command kept 40-97 % on
average (below, points pinned at 100 % have no spread; above, too few runs); each run's
deviation from its command's mean, scaled by sqrt(n / (n - 1)) so that their spread is
the runs' own. Draws three runs per arm from those deviations (seeded), for a candidate
as good as the better arm or 2 points better, with the other arm as good or 5 points
below.
Usage (from the repository root): python docs/data/cpu-2026-12-06-interleave/oracle.py
"""
import collections
import glob
import json
import math
import os
import random
import statistics as st

runs = collections.defaultdict(list)
for f in glob.glob("docs/data/cpu-*/**/*.json", recursive=True):
    try:
        with open(f) as fh:
            d = json.load(fh)
    except (OSError, ValueError):
        continue
    if (not isinstance(d, dict) or d.get("benchmark") != "engine" or "metrics" not in d
            or "interleave" in d):
        continue
    c = d["config"]
    key = (os.path.dirname(f), d["policy"], c.get("max_batch", 1), tuple(c.get("slots", ())),
           d["workload"], d["robots"])
    runs[key].append(d["metrics"]["attainment"] * 100)
res = []
for v in runs.values():
    if len(v) >= 3 and 40 <= st.fmean(v) <= 97:
        m = st.fmean(v)
        res += [(x - m) * math.sqrt(len(v) / (len(v) - 1)) for x in v]
print(f"{len(res)} runs of {sum(len(v) >= 3 and 40 <= st.fmean(v) <= 97 for v in runs.values())}"
      f" commands; spread of one run {st.pstdev(res):.1f} points")
rng = random.Random(0)


def med3() -> float:
    """The median of three runs' deviations."""
    return st.median(rng.choice(res) for _ in range(3))


N = 20000
for gap in (0.0, 5.0):
    for adv in (0.0, 2.0):
        ok = sum(adv + med3() >= max(med3(), med3() - gap) - 2 for _ in range(N)) / N
        print(f"other arm {gap:.0f} points below the better, candidate {adv:+.0f} against it: "
              f"within at one point {ok:.2f}, at all seven {ok ** 7:.3f}")
