#!/usr/bin/env bash
# The arms gpu_erc.sh is compared with, on today's code: lane batch-4 XInfer,
# xinfer_batch (same table and slots) and unbatched XInfer (default table, 4,4,6).
set -u
cd /work/main
B=config/rate_table_default_batch4.json
for w in phases parcel; do
  for p in xinfer xinfer_batch; do
    echo "== $w $p batch-4 $(date -u +%T)"
    ./env.sh xinfer-sim erc --policy $p --workload $w --robots 12-40 --rounds 2 --slots 12,12,16 \
      --max-batch 4 --rate-table $B 2>&1 | tail -1
  done
  echo "== $w xinfer unbatched $(date -u +%T)"
  ./env.sh xinfer-sim erc --policy xinfer --workload $w --robots 12-40 --rounds 2 2>&1 | tail -1
done
echo "done $(date -u +%T)"
