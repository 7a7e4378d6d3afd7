#!/usr/bin/env bash
# Each step of the gated batch-forming chain on the modelled GPU at phases 16 robots
# (lane batching's ERC is 20 there, the filling policies' 14-15), then the ERC of the
# two that held (gpu_erc.sh more). Outputs: gpu_phases16.txt, gpu_erc_more.txt.
set -u
cd /work/main
B=config/rate_table_default_batch4.json
for p in xinfer xinfer_batch xinfer_batch_gated xinfer_batch_riders xinfer_batch_pressure \
    xinfer_batch_ties xinfer_batch_fill xinfer_batch_fill_slots xinfer_batch_fill_slots_floors \
    xinfer_batch_fill_slots_strict; do
  echo "== $p"
  ./env.sh xinfer-sim run --workload phases --robots 16 --rounds 2 --policy $p --slots 12,12,16 \
    --max-batch 4 --rate-table $B --quiet 2>&1 | tail -3
done
"$(dirname "$0")/gpu_erc.sh" more
