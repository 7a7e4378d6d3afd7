#!/usr/bin/env bash
# #28: projected ERC on the paper's GPU table with the batch-cost model of section 5.3
# (rate_table_default_batch4.json), slots 12,12,16, 2 rounds.
#   gpu_erc.sh fill  fsf and fs                               -> gpu_erc.txt
#   gpu_erc.sh base  lane batch-4 XInfer, xinfer_batch, and
#                    unbatched XInfer on its default table     -> gpu_erc_base.txt
#   gpu_erc.sh more  pressure and fst (after gpu_phases16.sh)  -> gpu_erc_more.txt
set -u
cd /work/main
B=config/rate_table_default_batch4.json
erc() {  # workload policy [extra args]
  echo "== $1 $2 ${*:3} $(date -u +%T)"
  ./env.sh xinfer-sim erc --policy $2 --workload $1 --robots 12-40 --rounds 2 "${@:3}" 2>&1 | tail -1
}
batched() {  # workload policy...: each on the batch table and slots
  for p in "${@:2}"; do erc $1 $p --slots 12,12,16 --max-batch 4 --rate-table $B; done
}
for w in phases parcel; do
  case ${1:-fill} in
    fill) batched $w xinfer_batch_fill_slots_floors xinfer_batch_fill_slots;;
    base) batched $w xinfer xinfer_batch
          erc $w xinfer;;
    more) batched $w xinfer_batch_pressure xinfer_batch_fill_slots_strict;;
  esac
done
