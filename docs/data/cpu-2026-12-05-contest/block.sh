#!/usr/bin/env bash
# #28: xinfer_batch_contest (con: fed with batch costs learned per batch size, and units
# predicted late by less than the predictor's own error still served alone) beside
# unbatched (unb) and lane-batched (lane) XInfer at every count the issue names: phases
# 2, 4, 6, 8, 12 and parcel around its ERC on this hour (8, 10, 12). 3 rounds; each round
# runs every point, the arms rotated per point. One factor table calibrated first. The
# host was fast and quiet this hour (isolated Action 31.9 ms; it was 47-99 ms before).
set -u
cd /work/main
export ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST ROS_DOMAIN_ID=91
R=/work/runs/con
mkdir -p $R
if [[ ! -f $R/rtf.json ]]; then
  ./env.sh xinfer-calibrate --backend torch --model pi0-tiny --action-processes 2 --bounds 2,2,2 \
    --max-units 4 --window 0.6 --repeats 3 --iso-repeats 8 --max-batch 4 --batch-factors \
    --monotone --out $R/rtf.json > $R/calib.log 2>&1
  echo "$(date -u +%T) calibrated rc=$?"
fi
C="--backend torch --model pi0-tiny --duration 40 --warmup 10 --action-processes 2 --compare-sim"
arm() {  # name workload robots round
  local s=r$4_$1_$2$3
  case $1 in
    unb)  A="--policy xinfer --slots 1,1,2 --rate-table $R/rtf.json";;
    lane) A="--policy xinfer --slots 4,4,8 --max-batch 4 --rate-table $R/rtf.json";;
    con)  A="--policy xinfer_batch_contest --slots 4,4,8 --max-batch 4 --rate-table $R/rtf.json";;
    fed)  A="--policy xinfer_batch_fill_slots_floors_fed --slots 4,4,8 --max-batch 4 --rate-table $R/rtf.json";;
  esac
  ./env.sh xinfer-bench engine $C --workload $2 --robots $3 $A --arm $1 --json $R/$s.json > $R/$s.log 2>&1
  echo "$(date -u +%T) $s rc=$? $(grep -o 'attainment[^,]*' $R/$s.log | head -1)"
}
L=(unb lane con)
for round in 1 2 3; do
  j=0
  for point in phases:2 phases:4 phases:6 phases:8 phases:12 parcel:8 parcel:10 parcel:12; do
    for i in 0 1 2; do arm ${L[$(( (i + round + j) % 3 ))]} ${point%:*} ${point#*:} $round; done
    j=$((j + 1))
  done
done
echo "$(date -u +%T) done"
