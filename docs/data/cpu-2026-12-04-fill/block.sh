#!/usr/bin/env bash
# #28, fill: unb, lane and fill (xinfer_batch_fill) at 4, 8 and 12 robots, phases,
# 3 rotated rounds, on a factor table calibrated first in the same block.
set -u
cd /work/main
export ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST ROS_DOMAIN_ID=88
R=/work/runs/f2
if [[ ! -f $R/rtf.json ]]; then
  ./env.sh xinfer-calibrate --backend torch --model pi0-tiny --action-processes 2 --bounds 2,2,2 \
    --max-units 4 --window 0.6 --repeats 3 --iso-repeats 8 --max-batch 4 --batch-factors \
    --monotone --out $R/rtf.json > $R/calib.log 2>&1
  echo "$(date -u +%T) calibrated rc=$?"
fi
C="--backend torch --model pi0-tiny --workload phases --duration 40 --warmup 10 --action-processes 2"
arm() {  # name robots round
  local f=$R/r$3_$1_$2.json
  case $1 in
    unb)  A="--policy xinfer --slots 1,1,2 --rate-table $R/rtf.json";;
    lane) A="--policy xinfer --slots 4,4,8 --max-batch 4 --rate-table $R/rtf.json";;
    fill) A="--policy xinfer_batch_fill --slots 4,4,8 --max-batch 4 --rate-table $R/rtf.json";;
  esac
  ./env.sh xinfer-bench engine $C --robots $2 $A --arm $1 --json $f > $R/r$3_$1_$2.log 2>&1
  echo "$(date -u +%T) r$3 $1 $2 rc=$? $(grep -o 'attainment[^,]*' $R/r$3_$1_$2.log | tail -1)"
}
L=(unb lane fill)
for round in 1 2 3; do
  for robots in 12 8 4; do
    for i in 0 1 2; do arm ${L[$(( (i + round) % 3 ))]} $robots $round; done
  done
done
echo done
