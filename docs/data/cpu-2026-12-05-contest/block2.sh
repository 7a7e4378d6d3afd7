#!/usr/bin/env bash
# #28, right after block.sh on its table: con beside fed (its parent without per-size
# costs and contested units) and lane batching at two points where con was short
# (phases 8, parcel 12). 3 rounds, arms rotated.
set -u
cd /work/main
export ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST ROS_DOMAIN_ID=91
R=/work/runs/con2
mkdir -p $R
T=/work/runs/con/rtf.json
C="--backend torch --model pi0-tiny --duration 40 --warmup 10 --action-processes 2 --compare-sim"
arm() {  # name workload robots round
  local s=r$4_$1_$2$3
  case $1 in
    lane) A="--policy xinfer --slots 4,4,8 --max-batch 4 --rate-table $T";;
    con)  A="--policy xinfer_batch_contest --slots 4,4,8 --max-batch 4 --rate-table $T";;
    fed)  A="--policy xinfer_batch_fill_slots_floors_fed --slots 4,4,8 --max-batch 4 --rate-table $T";;
  esac
  ./env.sh xinfer-bench engine $C --workload $2 --robots $3 $A --arm $1 --json $R/$s.json > $R/$s.log 2>&1
  echo "$(date -u +%T) $s rc=$? $(grep -o 'attainment[^,]*' $R/$s.log | head -1)"
}
L=(lane con fed)
for round in 1 2 3; do
  j=0
  for point in phases:8 parcel:12; do
    for i in 0 1 2; do arm ${L[$(( (i + round + j) % 3 ))]} ${point%:*} ${point#*:} $round; done
    j=$((j + 1))
  done
done
echo "$(date -u +%T) done"
