#!/usr/bin/env bash
# Why is Action slower at batch 1 in the batched configuration? 2 robots, phases.
set -u
cd /work/main
export ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST ROS_DOMAIN_ID=89
R=/work/runs/ab; T=/work/runs/f4/rtf.json
C="--backend torch --model pi0-tiny --workload phases --duration 30 --warmup 8 --action-processes 2 --robots 2 --rate-table $T"
run() { # name round args...
  local n=$1 r=$2; shift 2
  ./env.sh xinfer-bench engine $C "$@" --arm $n --json $R/r${r}_$n.json > $R/r${r}_$n.log 2>&1
  echo "$(date -u +%T) r$r $n $(grep -o 'attainment=[0-9.]*' $R/r${r}_$n.log) $(grep -o 'action=[0-9.]*' $R/r${r}_$n.log | head -1) $(grep -o 'fast path: [0-9]*' $R/r${r}_$n.log)"
}
for r in 1 2; do
  run unb $r --policy xinfer --slots 1,1,2
  run s448b1 $r --policy xinfer --slots 4,4,8
  run s112b4 $r --policy xinfer --slots 1,1,2 --max-batch 4
  run lane $r --policy xinfer --slots 4,4,8 --max-batch 4
done
