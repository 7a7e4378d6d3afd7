#!/usr/bin/env bash
# #28, fill_slots at the counts not yet measured: phases 2 and 6, parcel 6 and 10 robots;
# unb, lane and fs (xinfer_batch_fill_slots), 3 rotated rounds, one factor table calibrated first.
set -u
cd /work/main
export ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST ROS_DOMAIN_ID=89
R=/work/runs/f4
if [[ ! -f $R/rtf.json ]]; then
  ./env.sh xinfer-calibrate --backend torch --model pi0-tiny --action-processes 2 --bounds 2,2,2 \
    --max-units 4 --window 0.6 --repeats 3 --iso-repeats 8 --max-batch 4 --batch-factors \
    --monotone --out $R/rtf.json > $R/calib.log 2>&1
  echo "$(date -u +%T) calibrated rc=$?"
fi
C="--backend torch --model pi0-tiny --duration 40 --warmup 10 --action-processes 2"
arm() {  # name workload robots round
  local s=r$4_$1_$2$3
  case $1 in
    unb)  A="--policy xinfer --slots 1,1,2 --rate-table $R/rtf.json";;
    lane) A="--policy xinfer --slots 4,4,8 --max-batch 4 --rate-table $R/rtf.json";;
    fs)   A="--policy xinfer_batch_fill_slots --slots 4,4,8 --max-batch 4 --rate-table $R/rtf.json";;
  esac
  ./env.sh xinfer-bench engine $C --workload $2 --robots $3 $A --arm $1 --json $R/$s.json > $R/$s.log 2>&1
  echo "$(date -u +%T) $s rc=$? $(grep -o 'attainment[^,]*' $R/$s.log | tail -1)"
}
L=(unb lane fs)
for round in 1 2 3; do
  for point in phases:2 phases:6 parcel:6 parcel:10; do
    for i in 0 1 2; do arm ${L[$(( (i + round) % 3 ))]} ${point%%:*} ${point##*:} $round; done
  done
done
echo done
