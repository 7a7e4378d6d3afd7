"""Where the 90 ms requests of trace.py's traces waited, late ones and all.

Per trace: the late share, and the mean ms before the first stage ('pre'), in the ready
queues (launch - ready: 'pol'), on a lane (forward start - launch: 'lane') and in the
forwards ('run'), in all and per stage (V, P, A), and the formed Action batches' sizes.
Requests sent in the first 8 s are left out. Usage: python ana.py TRACE.json ...
"""

import json
import statistics as st
import sys

WARMUP_S = 8.0
DELTA_S = 0.004  # deadline = arrival + budget - delta


def load(path: str) -> list[dict]:
    """The finished requests of one trace, warm-up left out."""
    with open(path) as fh:
        rows = json.load(fh)
    t0 = min(r["submitted"] for r in rows.values() if "submitted" in r)
    return [r for r in rows.values() if "end" in r and r.get("budget") is not None
            and r["submitted"] - t0 >= WARMUP_S]


def mean(x: list[float]) -> float:
    """The mean, NaN when empty."""
    return st.mean(x) if x else float("nan")


def parts(group: list[dict]) -> str:
    """The group's mean waits and forwards, in all and per stage."""
    total = {k: [] for k in ("pre", "pol", "lane", "run")}
    per = {s: {k: [] for k in ("pol", "lane", "run")} for s in range(3)}
    sizes = []
    for r in group:
        total["pre"].append((float(r.get("ready0", r["submitted"])) - r["submitted"]) * 1e3)
        sums = {"pol": 0.0, "lane": 0.0, "run": 0.0}
        for s in range(3):
            d = r["stages"].get(str(s))
            if not d or "t0" not in d or "launch" not in d:
                continue
            got = {"pol": d["launch"] - d["ready"], "lane": d["t0"] - d["launch"],
                   "run": d["t1"] - d["t0"]}
            for k, v in got.items():
                per[s][k].append(v * 1e3)
                sums[k] += v * 1e3
            if s == 2 and d.get("size"):
                sizes.append(d["size"])
        for k, v in sums.items():
            total[k].append(v)
    out = " ".join(f"{k}={mean(v):.1f}" for k, v in total.items())
    out += " | " + " ".join(
        f"{'VPA'[s]}:pol={mean(v['pol']):.1f},lane={mean(v['lane']):.1f},run={mean(v['run']):.1f}"
        for s, v in per.items())
    if sizes:
        out += (f" | A batch size mean {mean(sizes):.2f}, "
                f">1: {sum(x > 1 for x in sizes)}/{len(sizes)}")
    return out


for path in sys.argv[1:]:
    tight = [r for r in load(path) if r["budget"] < 0.2]
    late = [r for r in tight if r["end"] > r["deadline"] + DELTA_S or r["status"] != "0"]
    print(f"== {path}: tight {len(tight)} late {len(late)} ({100 * len(late) / len(tight):.1f}%)")
    print("  late tight:", parts(late))
    print("  all tight :", parts(tight))
    ends = sorted(r["end"] - r["submitted"] for r in late)
    if ends:
        print(f"  late latency ms p50 {ends[len(ends) // 2] * 1e3:.1f} "
              f"p90 {ends[int(len(ends) * 0.9)] * 1e3:.1f}")
