#!/usr/bin/env bash
# #28, interleaved: one run a point, the saturation switch (xinfer_batch_switch, slots
# 4,4,8, max_batch 4) pinned unbatched (off), pinned batched (on) and on its meter
# (auto) in turn, 6 s each, 12 cycles (every order of the three twice), the first 1 s
# of each segment not counted. First an A/A check at phases 6 (off beside off).
# On the table of block3 (../cpu-2026-12-06-switch/rtf.json). Runs from a snapshot of
# the tree (/work/blk, PYTHONPATH first) so that edits in /work/main do not reach it.
set -u
cd /work/blk
export ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST ROS_DOMAIN_ID=96 PYTHONPATH=/work/blk
T=docs/data/cpu-2026-12-06-switch/rtf.json
O=/work/runs/interleave/block  # copied to docs/data/cpu-2026-12-06-interleave/block/
mkdir -p $O
C="--backend torch --model pi0-tiny --warmup 10 --action-processes 2 --policy xinfer_batch_switch --slots 4,4,8 --max-batch 4 --rate-table $T --interleave 6"
point() {  # name workload robots arms duration
  echo "$(date -u +%T) start $1"
  .venv/bin/xinfer-bench engine $C --workload $2 --robots $3 --interleave-arms $4 \
    --duration $5 --arm $1 --json $O/$1.json > $O/$1.log 2>&1
  echo "$(date -u +%T) $1 rc=$?"
}
point aa_phases6 phases 6 off,off 154
for p in "phases 2" "phases 4" "phases 6" "phases 8" "phases 12" \
         "parcel 6" "parcel 8" "parcel 10" "parcel 12"; do
  set -- $p
  point $1$2 $1 $2 off,on,auto 226
done
echo DONE
