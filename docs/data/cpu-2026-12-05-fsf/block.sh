#!/usr/bin/env bash
# #28: fill_slots keeping the tight floors (fsf) beside unb, lane and fs
# (xinfer_batch_fill_slots) at 6, 8 and 12 robots on phases, 3 rotated rounds, one
# factor table calibrated first (rtf.json); --compare-sim on.
set -u
cd /work/main
export ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST ROS_DOMAIN_ID=89
R=/work/runs/f7
if [[ ! -f $R/rtf.json ]]; then
  ./env.sh xinfer-calibrate --backend torch --model pi0-tiny --action-processes 2 --bounds 2,2,2 \
    --max-units 4 --window 0.6 --repeats 3 --iso-repeats 8 --max-batch 4 --batch-factors \
    --monotone --out $R/rtf.json > $R/calib.log 2>&1
  echo "$(date -u +%T) calibrated rc=$?"
fi
C="--backend torch --model pi0-tiny --workload phases --duration 40 --warmup 10 --action-processes 2 --compare-sim"
arm() {  # name robots round
  local s=r$3_$1_$2
  case $1 in
    unb)  A="--policy xinfer --slots 1,1,2 --rate-table $R/rtf.json";;
    lane) A="--policy xinfer --slots 4,4,8 --max-batch 4 --rate-table $R/rtf.json";;
    fs)   A="--policy xinfer_batch_fill_slots --slots 4,4,8 --max-batch 4 --rate-table $R/rtf.json";;
    fsf)  A="--policy xinfer_batch_fill_slots_floors --slots 4,4,8 --max-batch 4 --rate-table $R/rtf.json";;
  esac
  ./env.sh xinfer-bench engine $C --robots $2 $A --arm $1 --json $R/$s.json > $R/$s.log 2>&1
  echo "$(date -u +%T) $s rc=$? $(grep -o 'attainment[^,]*' $R/$s.log | head -1)"
}
L=(unb lane fs fsf)
for round in 1 2 3; do
  j=0
  for robots in 6 8 12; do
    for i in 0 1 2 3; do arm ${L[$(( (i + round + j) % 4 ))]} $robots $round; done
    j=$((j + 1))
  done
done
echo "$(date -u +%T) done"
