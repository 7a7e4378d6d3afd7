#!/usr/bin/env bash
# #28 (fourth block, the switch with a dwell of 1 s): sw (xinfer_batch_switch) beside
# unbatched (unb) and lane-batched (lane) XInfer at phases 6, 8 and parcel 10, where
# the switch changed mode 1-36 times a run without one (block2, block3). 3 rounds, arms
# rotated, on the table of block3 (../cpu-2026-12-06-switch/rtf.json). Runs from a
# snapshot of the tree (/work/blk, PYTHONPATH first) so that edits in /work/main do not
# reach it.
set -u
cd /work/blk
export ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST ROS_DOMAIN_ID=95 PYTHONPATH=/work/blk
T=docs/data/cpu-2026-12-06-switch/rtf.json
O=/work/runs/dwell/block4  # copied to docs/data/cpu-2026-12-06-dwell/block4/
mkdir -p $O
C="--backend torch --model pi0-tiny --duration 40 --warmup 10 --action-processes 2 --compare-sim"
arm() {  # name workload robots round
  local s=r$4_$1_$2$3
  case $1 in
    unb)  A="--policy xinfer --slots 1,1,2 --rate-table $T";;
    lane) A="--policy xinfer --slots 4,4,8 --max-batch 4 --rate-table $T";;
    sw)   A="--policy xinfer_batch_switch --slots 4,4,8 --max-batch 4 --rate-table $T";;
  esac
  .venv/bin/xinfer-bench engine $C --workload $2 --robots $3 $A --arm $1 --json $O/$s.json > $O/$s.log 2>&1
  echo "$(date -u +%T) $s rc=$? $(grep -o 'attainment=[^ ]*' $O/$s.log | head -1) $(grep -o 'saturated [0-9]*%[^)]*' $O/$s.log)"
}
L=(unb lane sw)
for round in 1 2 3; do
  j=0
  for point in phases:8 phases:6 parcel:10; do
    for i in 0 1 2; do arm ${L[$(( (i + round + j) % 3 ))]} ${point%:*} ${point#*:} $round; done
    j=$((j + 1))
  done
done
echo "$(date -u +%T) done"
