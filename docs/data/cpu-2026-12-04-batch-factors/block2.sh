#!/usr/bin/env bash
# Block 2: ties on an even-split batch table against ties on the factor table at 8 and
# 12 robots; unb, lane and ties (factor table) at 4 robots. 3 rotated rounds.
set -u
cd /work/main
export ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST ROS_DOMAIN_ID=87
R=/work/runs/f1
while ! grep -q '^done' $R/block.log; do sleep 10; done
if [[ ! -f $R/rtb4.json ]]; then
  ./env.sh xinfer-calibrate --backend torch --model pi0-tiny --action-processes 2 --bounds 3,3,3 \
    --max-units 6 --window 0.6 --repeats 3 --iso-repeats 8 --max-batch 4 \
    --monotone --out $R/rtb4.json > $R/calib_b4.log 2>&1
fi
C="--backend torch --model pi0-tiny --workload phases --duration 40 --warmup 10 --action-processes 2"
arm() {  # name robots round
  local f=$R/s$3_$1_$2.json
  case $1 in
    unb)    A="--policy xinfer --slots 1,1,2 --rate-table $R/rtf.json";;
    lane)   A="--policy xinfer --slots 4,4,8 --max-batch 4 --rate-table $R/rtf.json";;
    ties)   A="--policy xinfer_batch_ties --slots 4,4,8 --max-batch 4 --rate-table $R/rtf.json";;
    tiesb4) A="--policy xinfer_batch_ties --slots 4,4,8 --max-batch 4 --rate-table $R/rtb4.json";;
  esac
  ./env.sh xinfer-bench engine $C --robots $2 $A --arm $1 --json $f > $R/s$3_$1_$2.log 2>&1
  echo "$(date -u +%T) s$3 $1 $2 rc=$? $(grep -o 'attainment[^,]*' $R/s$3_$1_$2.log | tail -1)"
}
for round in 1 2 3; do
  if (( round % 2 )); then P=(ties tiesb4); else P=(tiesb4 ties); fi
  for robots in 8 12; do for a in "${P[@]}"; do arm $a $robots $round; done; done
  L=(unb lane ties)
  for i in 0 1 2; do arm ${L[$(( (i + round) % 3 ))]} 4 $round; done
done
echo done
