"""Paired rounds of one block: each arm's attainment, and the candidates' gaps.

The gaps are to the better of unbatched (unb) and lane batching (lane), round by round.

The issue's reading: the median over the rounds of the candidate's attainment, against
the better of the two arms' medians, within 2 points. The per-round gaps show how much
of it the host's speed moved. Also the 90 ms class, sheds and Action units per forward.
Runs are named rROUND_ARM_POINT.json, where POINT is a robot count (phases) or a
workload and a count (parcel10). Goodput is each candidate's against unbatched.
Usage: python paired.py DIR [CANDIDATE ...] (default candidates: fs fst).
"""
import glob
import json
import re
import statistics as st
import sys


def point(name):
    """("phases", 12) for "12", ("parcel", 10) for "parcel10"."""
    m = re.fullmatch(r"([a-z]*)(\d+)", name)
    return (m.group(1) or "phases", int(m.group(2)))


root, cands = sys.argv[1], sys.argv[2:] or ["fs", "fst"]
runs = {}
for f in glob.glob(f"{root}/r*_*.json"):
    r, arm, n = f.rsplit("/", 1)[1][:-5].split("_")
    with open(f) as fh:
        d = json.load(fh)
    b = d["batches"]["action"]
    runs[(point(n), int(r[1:]), arm)] = dict(
        att=d["metrics"]["attainment"] * 100,
        goodput=d["metrics"]["goodput_rps"],
        tight=d["metrics"]["per_budget"].get("90", float("nan")) * 100,
        shed=d["statuses"].get("SHED", 0),
        units=sum(int(k) * v for k, v in b.items()) / max(1, sum(b.values())))
for n in sorted({k[0] for k in runs}):
    rounds = sorted({k[1] for k in runs if k[0] == n})
    arms = sorted({k[2] for k in runs if k[0] == n})
    med = {a: st.median(runs[(n, r, a)]["att"] for r in rounds) for a in arms}
    best = max(med["unb"], med["lane"])
    print(f"== {n[0]} {n[1]} robots: median attainment "
          + ", ".join(f"{a} {med[a]:.1f}" for a in arms))
    for a in arms:
        v = [runs[(n, r, a)] for r in rounds]
        print(f"   {a:<4} per round {[round(x['att'], 1) for x in v]}  90 ms class "
              f"{[round(x['tight'], 1) for x in v]}  shed {[x['shed'] for x in v]}  "
              f"Action units/forward {[round(x['units'], 2) for x in v]}")
    for c in cands:
        if c not in med:
            continue
        gaps = [runs[(n, r, c)]["att"]
                - max(runs[(n, r, "unb")]["att"], runs[(n, r, "lane")]["att"])
                for r in rounds]
        verdict = "within" if med[c] >= best - 2 else "short"
        good = st.median(runs[(n, r, c)]["goodput"] for r in rounds) / st.median(
            runs[(n, r, "unb")]["goodput"] for r in rounds)
        print(f"   {c} - better median {med[c] - best:+.1f} ({verdict}); per round "
              f"{[round(g, 1) for g in gaps]}, median {st.median(gaps):+.1f}; "
              f"goodput {good:.2f}x unb")
