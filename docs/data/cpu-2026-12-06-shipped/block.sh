#!/bin/bash
# The shipped configuration (sw: xinfer by name with torch.max_batch 4 and batch_when
# saturated, i.e. the saturation switch on 4,4,8) beside unbatched XInfer on 1,1,2 (unb)
# and lane batching (lane: xinfer with max_batch 4 on 4,4,8, batching whenever units
# wait), all on the shipped table, separate runs with the speed probe, the arms' order
# rotated each round. Run from the repository root:
#   OUT=/work/runs/shipped ./docs/data/cpu-2026-12-06-shipped/block.sh
# then: xinfer-bench compare $OUT/*.json --candidate sw [--figure goodput_rps]
# COUNTS="4 8": robot counts; TABLE=FILE: another rate table; EXTRA: more options for
# every run (e.g. "--compile on", docs/data/cpu-2026-12-06-compile/); PY=DIR: import
# xinfer_ros from DIR (a snapshot of the tree, so that edits here do not reach a block).
# ARMS="unb sw swhi": other arms, rotated left each round as the default three are;
# swhi is the switch with the band ENTER/LEAVE (default 1.10/1.05) through
# docs/data/cpu-2026-12-06-spread/sw_band.py.
set -u
out=${OUT:?}; mkdir -p "$out"
export ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST ROS_DOMAIN_ID=72
[ -n "${PY:-}" ] && export PYTHONPATH=$PY
C="--backend torch --model pi0-tiny --workload phases --duration 40 --warmup 10 --action-processes 2 --rate-table ${TABLE:-config/rate_table_cpu_pi0_tiny_batch4_factors.json} ${EXTRA:-}"
read -ra arms <<< "${ARMS:-unb lane sw}"
for robots in ${COUNTS:-12 8}; do
  for round in 0 1 2; do
    for ((i = 0; i < ${#arms[@]}; i++)); do
      a=${arms[(i + round) % ${#arms[@]}]}
      run=(.venv/bin/xinfer-bench)
      case $a in
        unb) args="--policy xinfer --slots 1,1,2";;
        lane) args="--policy xinfer --slots 4,4,8 --max-batch 4";;
        sw) args="--policy xinfer_batch_switch --slots 4,4,8 --max-batch 4";;
        swhi) args="--policy xinfer_batch_switch --slots 4,4,8 --max-batch 4"
              run=(env ENTER="${ENTER:-1.10}" LEAVE="${LEAVE:-1.05}" .venv/bin/python
                   "$(dirname "$0")/../cpu-2026-12-06-spread/sw_band.py");;
        *) echo "unknown arm $a" >&2; exit 2;;
      esac
      name=p${robots}_r$((round + 1))_$a
      "${run[@]}" engine $C --robots $robots $args --arm $a --json "$out/$name.json" > "$out/$name.log" 2>&1
      rc=$?; echo "$(date +%T) $name rc=$rc"
    done
  done
done
echo DONE
