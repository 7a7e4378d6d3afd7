#!/bin/bash
# Off-pairs with phase spreading (2026-12-06, 22:54-23:04 UTC, on 2a7e378): unbatched
# XInfer on 1,1,2 (unb) against the saturation switch held unsaturated on 4,4,8 with
# max_batch 4 (off: the band out of reach through ../cpu-2026-12-06-interleave/off_pairs/
# sw_off.py), six pairs alternating, phases 6, --phase-spread as config/fleet.yaml serves,
# the shipped table. Run from the repository root:
#   OUT=/tmp/offspread docs/data/cpu-2026-12-06-offspread/pairs.sh
# then: xinfer-bench compare $OUT/r*_*.json --candidate off --probe python
# ROBOTS=N: another count; PY=DIR: import xinfer_ros from DIR (a snapshot of the tree).
set -u
out=${OUT:?}; mkdir -p "$out"
export ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST ROS_DOMAIN_ID=74
[ -n "${PY:-}" ] && export PYTHONPATH=$PY
C="--backend torch --model pi0-tiny --workload phases --robots ${ROBOTS:-6} --duration 40 --warmup 10 --action-processes 2 --rate-table config/rate_table_cpu_pi0_tiny_batch4_factors.json --phase-spread"
for i in 1 2 3 4 5 6; do
  if [ $((i % 2)) = 1 ]; then order="unb off"; else order="off unb"; fi
  for a in $order; do
    if [ $a = unb ]; then
      .venv/bin/xinfer-bench engine $C --policy xinfer --slots 1,1,2 --arm unb --json "$out/r${i}_unb.json" > "$out/r${i}_unb.log" 2>&1
    else
      .venv/bin/python docs/data/cpu-2026-12-06-interleave/off_pairs/sw_off.py engine $C --policy xinfer_batch_switch --slots 4,4,8 --max-batch 4 --arm off --json "$out/r${i}_off.json" > "$out/r${i}_off.log" 2>&1
    fi
    rc=$?; echo "$(date +%T) r$i $a rc=$rc"
  done
done
echo DONE
