#!/usr/bin/env bash
# #28: mar (xinfer_batch_margin) beside unbatched (unb) and lane-batched (lane) XInfer at
# the counts block.sh left out: phases 4, 6 and parcel 10. 3 rounds, arms rotated, on the
# table of 20:53 (rtf.json). Runs from /work/main at d2aa34e (the JSON has `lateness`).
set -u
cd /work/main
export ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST ROS_DOMAIN_ID=91
R=/work/runs/d6  # its rtf.json: docs/data/cpu-2026-12-05-margin/rtf.json
O=$R/blk2  # copied to docs/data/cpu-2026-12-05-margin/block2/
mkdir -p $O
C="--backend torch --model pi0-tiny --duration 40 --warmup 10 --action-processes 2 --compare-sim"
arm() {  # name workload robots round
  local s=r$4_$1_$2$3
  case $1 in
    unb)  A="--policy xinfer --slots 1,1,2 --rate-table $R/rtf.json";;
    lane) A="--policy xinfer --slots 4,4,8 --max-batch 4 --rate-table $R/rtf.json";;
    mar)  A="--policy xinfer_batch_margin --slots 4,4,8 --max-batch 4 --rate-table $R/rtf.json";;
  esac
  ./env.sh xinfer-bench engine $C --workload $2 --robots $3 $A --arm $1 --json $O/$s.json > $O/$s.log 2>&1
  echo "$(date -u +%T) $s rc=$? $(grep -o 'attainment[^,]*' $O/$s.log | head -1)"
}
L=(unb lane mar)
for round in 1 2 3; do
  j=0
  for point in phases:4 phases:6 parcel:10; do
    for i in 0 1 2; do arm ${L[$(( (i + round + j) % 3 ))]} ${point%:*} ${point#*:} $round; done
    j=$((j + 1))
  done
done
echo "$(date -u +%T) done"
