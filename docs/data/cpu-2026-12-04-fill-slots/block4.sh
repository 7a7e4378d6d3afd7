#!/usr/bin/env bash
# #28, fill_slots at 4 robots: unb, lane and fs, phases,
# 3 rotated rounds, on the factor table of the fill block (docs/data/cpu-2026-12-04-fill, 21:28).
set -u
cd /work/main
export ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST ROS_DOMAIN_ID=89
R=/work/runs/f3
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
    fill) A="--policy xinfer_batch_fill --slots 4,4,8 --max-batch 4 --rate-table $R/rtf.json";;
    unb)  A="--policy xinfer --slots 1,1,2 --rate-table $R/rtf.json";;
    lane) A="--policy xinfer --slots 4,4,8 --max-batch 4 --rate-table $R/rtf.json";;
    fs)   A="--policy xinfer_batch_fill_slots --slots 4,4,8 --max-batch 4 --rate-table $R/rtf.json";;
  esac
  ./env.sh xinfer-bench engine $C --robots $2 $A --arm $1 --json $f > $R/r$3_$1_$2.log 2>&1
  echo "$(date -u +%T) r$3 $1 $2 rc=$? $(grep -o 'attainment[^,]*' $R/r$3_$1_$2.log | tail -1)"
}
L=(unb lane fs)
for round in 1 2 3; do
  for robots in 4; do
    for i in 0 1 2; do arm ${L[$(( (i + round) % 3 ))]} $robots $round; done
  done
done
echo done
