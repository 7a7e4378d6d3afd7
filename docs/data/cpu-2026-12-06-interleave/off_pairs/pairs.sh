#!/bin/bash
# Unbatched XInfer on 1,1,2 (unb) against the saturation switch held unsaturated on
# 4,4,8 with max_batch 4 (off: sw_off.py moves the meter's band out of reach), six
# pairs alternating, phases 6, on db32243 (2026-12-06 08:31-08:41 UTC). Below
# saturation the switch decides as unb does; these pairs ask whether its engine
# configuration (slots, max_batch, the meter's upkeep) costs anything by itself.
# Ran from /work/runs/off/ (the paths below); readings: compare.txt.
cd /work/blk
export ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST ROS_DOMAIN_ID=71
C="--backend torch --model pi0-tiny --workload phases --robots 6 --duration 40 --warmup 10 --action-processes 2 --rate-table docs/data/cpu-2026-12-06-switch/rtf.json"
for i in 1 2 3 4 5 6; do
  if [ $((i % 2)) = 1 ]; then order="unb off"; else order="off unb"; fi
  for a in $order; do
    if [ $a = unb ]; then
      .venv/bin/xinfer-bench engine $C --policy xinfer --slots 1,1,2 --arm unb --json /work/runs/off/r${i}_unb.json > /work/runs/off/r${i}_unb.log 2>&1
    else
      .venv/bin/python /work/runs/off/sw_off.py engine $C --policy xinfer_batch_switch --slots 4,4,8 --max-batch 4 --arm off --json /work/runs/off/r${i}_off.json > /work/runs/off/r${i}_off.log 2>&1
    fi
    echo "$(date +%T) r$i $a rc=$?"
  done
done
echo DONE
