#!/usr/bin/env bash
# Reproduce the simulator figures (paper §6.3 / Figure 8 / Table 8 / Figure 2 analogues)
# with the default rate table. Writes JSON, PNGs and logs under ${1:-results/sim}.
# Full run: roughly 15-25 CPU-minutes on 2 cores; each block prints its wall time.
set -euo pipefail
OUT=${1:-results/sim}
PY=${PY:-.venv/bin/python}
SIM="$PY -m xinfer_ros.cli.sim"
mkdir -p "$OUT"

run() {  # run NAME ARGS... : time one sub-command and keep its table
  local name=$1; shift
  local t0=$SECONDS
  $SIM "$@" --quiet | tee "$OUT/$name.txt"
  echo "[$name] wall $((SECONDS - t0)) s" | tee -a "$OUT/$name.txt"
}

# Figure 8(a-c) and ERC on alternating phases: 4 policies, 8-20 robots, 3 x 210 s.
run phases compare --workload phases --robots 8,10,12,14,15,16,18,20 --rounds 3 \
  --out "$OUT/phases"
# Parcel handling, Figure 8(f): 10-20 robots.
run parcel compare --workload parcel --robots 10-20:2 --rounds 3 --out "$OUT/parcel"
# Table 8-like ablations at 18 robots.
ABL=xinfer,xinfer_no_interference,xinfer_strict_priority,xinfer_no_arrival,xinfer_entry_only,xinfer_zero_slack
run ablation_phases compare --workload phases --policy "$ABL" --robots 18 --rounds 3 \
  --out "$OUT/ablation_phases"
run ablation_parcel compare --workload parcel --policy "$ABL" --robots 18 --rounds 3 \
  --out "$OUT/ablation_parcel"
# Figure 8(d) bursty arrivals (12 base robots) and 8(e) multiple budgets (15 robots).
run bursty compare --workload bursty --robots 12 --rounds 3 --out "$OUT/bursty"
run multi_budget compare --workload multi_budget --robots 15 --rounds 3 --out "$OUT/multi_budget"
# Figure 2: projected parcels/h from the phases latency curve.
run project project --from-json "$OUT/phases/compare.json" --out "$OUT/projection"
