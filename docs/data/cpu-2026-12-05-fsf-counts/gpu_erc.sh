#!/usr/bin/env bash
# #28: the projected ERC of fsf (and fs beside it) on the paper's GPU table with the
# batch-cost model of section 5.3 (rate_table_default_batch4.json), as for xinfer_batch.
set -u
cd /work/main
B=config/rate_table_default_batch4.json
for w in phases parcel; do
  for p in xinfer_batch_fill_slots_floors xinfer_batch_fill_slots; do
    echo "== $w $p $(date -u +%T)"
    ./env.sh xinfer-sim erc --policy $p --workload $w --robots 12-40 --rounds 2 --slots 12,12,16 \
      --max-batch 4 --rate-table $B 2>&1 | tail -4
  done
done
echo "done $(date -u +%T)"
