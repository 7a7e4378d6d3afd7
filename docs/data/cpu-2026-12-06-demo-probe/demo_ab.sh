#!/bin/bash
# make demo's fleet at equal budgets (x1.21), each run with the speed probe beside it:
# the shipped configuration (arm "shipped": batching up to 4 while saturated) against
# the previous one (arm "previous": db32243's config/fleet.yaml, unbatched xinfer on
# 1,1,2), ABBA rounds. Run from a snapshot of the tree as
#   OUT=/work/runs/demo_probe ./demo_ab.sh
# then: xinfer-bench compare $OUT/*.json --candidate shipped
set -u
here=$(cd "$(dirname "$0")" && pwd); out=${OUT:?}; mkdir -p "$out"
n=0
for round in ${ROUNDS:-1 2 3}; do
  for arm in shipped previous previous shipped; do
    n=$((n + 1)); name=$(printf '%02d_%s' $n $arm)
    extra=()
    [ $arm = previous ] && extra=(--config "$here/../cpu-2026-12-06-interleave/demo_ab/fleet_db32243.yaml")
    ./env.sh python -m xinfer_ros.cli.fleet --no-progress --budget-scale 1.21 --arm $arm \
      "${extra[@]}" --json "$out/$name.json" --out "$out/out_$name" > "$out/$name.log" 2>&1
    echo "$(date +%T) round $round $name rc=$?"
  done
done
