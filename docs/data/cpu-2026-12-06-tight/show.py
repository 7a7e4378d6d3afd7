"""One line per engine report in a directory: attainment, goodput, classes, probe, batches.

Usage: python docs/data/cpu-2026-12-06-tight/show.py DIR
"""

import json
import sys
from pathlib import Path

for path in sorted(Path(sys.argv[1]).glob("*.json")):
    report = json.loads(path.read_text())
    m = report["metrics"]
    action = report.get("batches", {}).get("action", {})
    units = sum(int(k) * v for k, v in action.items())
    per_forward = units / max(sum(action.values()), 1)
    classes = {k: round(v, 3) for k, v in m["per_budget"].items()}
    probe = report["speed_probe"]
    saturated = (report.get("saturation") or {}).get("saturated_share", 0.0)
    print(f"{path.stem:14s} att {m['attainment']:.3f} gp {m['goodput_rps']:.1f} "
          f"thr {m['throughput_rps']:.1f} req {m['requests']} {classes} "
          f"py {probe['python']['median_ms']:.2f} mm {probe['matmul']['median_ms']:.2f} "
          f"A/fw {per_forward:.2f} sat {saturated:.2f}")
