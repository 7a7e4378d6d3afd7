#!/usr/bin/env bash
# #28: batch members that keep the predictor's error as slack (mar: xinfer_batch_margin)
# and units that learn the time they run, not the time they wait for a lane (def:
# xinfer_batch_contest_deferred), each con (xinfer_batch_contest) and one setting,
# beside con, unbatched (unb) and lane-batched (lane) XInfer at the counts where con
# was short of the better arm on 2026-12-05 (phases 8, 12; parcel 8, 12). 3 rounds;
# each round runs every point, the arms rotated per point. One factor table,
# calibrated first (isolated Action 32.1 ms: the same fast host as 2026-12-05 18:00).
# Runs from a snapshot of the tree (/work/blk), so that edits to /work/main during the
# block do not change its later runs.
set -u
cd /work/blk
export ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST ROS_DOMAIN_ID=91
R=/work/runs/d6  # its rtf.json: docs/data/cpu-2026-12-05-margin/rtf.json
O=$R/blk
mkdir -p $O
C="--backend torch --model pi0-tiny --duration 40 --warmup 10 --action-processes 2 --compare-sim"
arm() {  # name workload robots round
  local s=r$4_$1_$2$3
  case $1 in
    unb)  A="--policy xinfer --slots 1,1,2 --rate-table $R/rtf.json";;
    lane) A="--policy xinfer --slots 4,4,8 --max-batch 4 --rate-table $R/rtf.json";;
    con)  A="--policy xinfer_batch_contest --slots 4,4,8 --max-batch 4 --rate-table $R/rtf.json";;
    mar)  A="--policy xinfer_batch_margin --slots 4,4,8 --max-batch 4 --rate-table $R/rtf.json";;
    def)  A="--policy xinfer_batch_contest_deferred --slots 4,4,8 --max-batch 4 --rate-table $R/rtf.json";;
  esac
  ./env.sh xinfer-bench engine $C --workload $2 --robots $3 $A --arm $1 --json $O/$s.json > $O/$s.log 2>&1
  echo "$(date -u +%T) $s rc=$? $(grep -o 'attainment[^,]*' $O/$s.log | head -1)"
}
L=(unb lane con mar def)
for round in 1 2 3; do
  j=0
  for point in phases:8 phases:12 parcel:8 parcel:12; do
    for i in 0 1 2 3 4; do arm ${L[$(( (i + round + j) % 5 ))]} ${point%:*} ${point#*:} $round; done
    j=$((j + 1))
  done
done
echo "$(date -u +%T) done"
