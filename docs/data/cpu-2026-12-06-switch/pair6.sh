#!/usr/bin/env bash
# #28: unbatched XInfer (unb, 1,1,2) against the switch (sw, 4,4,8, max_batch 4) at
# phases 6, where the switch stays unsaturated: 5 pairs, order alternating, on 2f50ae1.
# Is the switch's residual gap below saturation the engine's or the host's?
set -u
cd /work/main
export ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST ROS_DOMAIN_ID=97
O=/work/runs/pair6/runs
mkdir -p $O
T=docs/data/cpu-2026-12-06-switch/rtf.json
C="--backend torch --model pi0-tiny --duration 40 --warmup 10 --action-processes 2 --compare-sim --workload phases --robots 6 --rate-table $T"
run() {
  case $1 in
    unb) A="--policy xinfer --slots 1,1,2";;
    sw)  A="--policy xinfer_batch_switch --slots 4,4,8 --max-batch 4";;
  esac
  .venv/bin/xinfer-bench engine $C $A --arm $1 --json $O/r$2_$1_phases6.json > $O/r$2_$1_phases6.log 2>&1
  echo "$(date -u +%T) r$2 $1 rc=$? $(grep -o 'attainment=[^ ]*' $O/r$2_$1_phases6.log | head -1) $(grep -o 'saturated [0-9]*%' $O/r$2_$1_phases6.log)"
}
for r in 1 2 3 4 5; do
  if [ $((r % 2)) = 1 ]; then run unb $r; run sw $r; else run sw $r; run unb $r; fi
done
echo "$(date -u +%T) done"
