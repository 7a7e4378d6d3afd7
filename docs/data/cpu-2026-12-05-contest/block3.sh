#!/usr/bin/env bash
# #28, after block2.sh on the same table: do the ungated forming policies, which launch up to
# the slots as lane batching does, keep up with it where it led con? xinfer_batch (xb) and
# xinfer_batch_nohold (xbn) beside lane at phases 8 and parcel 12. 3 rounds, arms rotated.
set -u
cd /work/main
export ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST ROS_DOMAIN_ID=91
R=/work/runs/con3
mkdir -p $R
T=/work/runs/con/rtf.json
C="--backend torch --model pi0-tiny --duration 40 --warmup 10 --action-processes 2 --compare-sim"
arm() {  # name workload robots round
  local s=r$4_$1_$2$3
  case $1 in
    lane) A="--policy xinfer --slots 4,4,8 --max-batch 4 --rate-table $T";;
    xb)   A="--policy xinfer_batch --slots 4,4,8 --max-batch 4 --rate-table $T";;
    xbn)  A="--policy xinfer_batch_nohold --slots 4,4,8 --max-batch 4 --rate-table $T";;
  esac
  ./env.sh xinfer-bench engine $C --workload $2 --robots $3 $A --arm $1 --json $R/$s.json > $R/$s.log 2>&1
  echo "$(date -u +%T) $s rc=$? $(grep -o 'attainment[^,]*' $R/$s.log | head -1)"
}
L=(lane xb xbn)
for round in 1 2 3; do
  j=0
  for point in phases:8 parcel:12; do
    for i in 0 1 2; do arm ${L[$(( (i + round + j) % 3 ))]} ${point%:*} ${point#*:} $round; done
    j=$((j + 1))
  done
done
echo "$(date -u +%T) done"
