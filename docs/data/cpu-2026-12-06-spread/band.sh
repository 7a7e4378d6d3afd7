#!/bin/bash
# Phase spreading on (as config/fleet.yaml serves): unbatched XInfer on 1,1,2 (unb), the
# shipped switch (sw, band 0.92/0.88) and the switch with a higher band (swhi, ENTER and
# LEAVE, default 1.10/1.05), separate runs with the speed probe, the arms' order rotated
# each round. Run from the repository root:
#   OUT=/work/runs/band COUNTS="12 14" docs/data/cpu-2026-12-06-spread/band.sh
# then: xinfer-bench compare $OUT/*.json --candidate swhi [--figure goodput_rps]
# PY=DIR: import xinfer_ros from DIR (a snapshot of the tree).
set -u
out=${OUT:?}; mkdir -p "$out"
export ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST ROS_DOMAIN_ID=73
[ -n "${PY:-}" ] && export PYTHONPATH=$PY
here=$(dirname "$0")
C="--backend torch --model pi0-tiny --workload phases --duration 40 --warmup 10 --action-processes 2 --rate-table config/rate_table_cpu_pi0_tiny_batch4_factors.json --phase-spread"
orders=("unb sw swhi" "sw swhi unb" "swhi unb sw")
for robots in ${COUNTS:-12 14}; do
  for round in 0 1 2; do
    for a in ${orders[$round]}; do
      run=(.venv/bin/xinfer-bench)
      case $a in
        unb) args="--policy xinfer --slots 1,1,2";;
        sw) args="--policy xinfer_batch_switch --slots 4,4,8 --max-batch 4";;
        swhi) args="--policy xinfer_batch_switch --slots 4,4,8 --max-batch 4"
              run=(env ENTER="${ENTER:-1.10}" LEAVE="${LEAVE:-1.05}" .venv/bin/python "$here/sw_band.py");;
      esac
      name=p${robots}_r$((round + 1))_$a
      "${run[@]}" engine $C --robots $robots $args --arm $a --json "$out/$name.json" > "$out/$name.log" 2>&1
      rc=$?; echo "$(date +%T) $name rc=$rc"
    done
  done
done
echo DONE
