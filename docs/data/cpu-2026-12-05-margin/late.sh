#!/usr/bin/env bash
# #28: where each arm's late requests spent their server time (the engine JSON's new
# `lateness`, and `lane` in stage_ms): unb, lane, con and mar at phases 8 and parcel 12,
# one round, arms rotated, on the table of 20:53. Runs from /work/main (the code with
# the lateness report).
set -u
cd /work/main
export ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST ROS_DOMAIN_ID=91
R=/work/runs/d6
O=$R/late
mkdir -p $O
C="--backend torch --model pi0-tiny --duration 40 --warmup 10 --action-processes 2"
arm() {  # name workload robots
  local s=r1_$1_$2$3
  case $1 in
    unb)  A="--policy xinfer --slots 1,1,2 --rate-table $R/rtf.json";;
    lane) A="--policy xinfer --slots 4,4,8 --max-batch 4 --rate-table $R/rtf.json";;
    con)  A="--policy xinfer_batch_contest --slots 4,4,8 --max-batch 4 --rate-table $R/rtf.json";;
    mar)  A="--policy xinfer_batch_margin --slots 4,4,8 --max-batch 4 --rate-table $R/rtf.json";;
  esac
  ./env.sh xinfer-bench engine $C --workload $2 --robots $3 $A --arm $1 --json $O/$s.json > $O/$s.log 2>&1
  echo "$(date -u +%T) $s rc=$? $(grep -o 'attainment[^,]*' $O/$s.log | head -1)"
}
for a in unb lane con mar; do arm $a phases 8; done
for a in mar con lane unb; do arm $a parcel 12; done
echo "$(date -u +%T) done"
