#!/bin/bash
# The async engine on the emulated device with the rate table calibrated on one H100
# with the pi0 Action loop as CUDA graphs (../h100-2026-12-06/), phases, xinfer, 12 s
# runs measured after 4 s (docs/BENCHMARKS.md 4.6). Run from the repository root:
#   OUT=/work/runs/emu_h100 docs/data/emu-2026-12-06-h100-table/run.sh
# 1. slot layouts at 8 and 16 robots, without (<n>_<engine>_<slots>.json) and with
#    --shed-doomed (d<n>_...), and serial;
# 2. rep/: 4,4,1 plain, with --shed-doomed and serial at 16 and 24 robots, seeds 1 and
#    2; then the CPU engine (pi0-tiny, the switch on 4,4,8, phases 12) with and
#    without --shed-doomed, twice (cpu12_<sw|dm>_<i>.json).
set -u
out=${OUT:?}; mkdir -p "$out/rep"
export ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST ROS_DOMAIN_ID=73
T=docs/data/h100-2026-12-06/rate_table_pi0_cuda_cudagraphs.json
E="--backend emulated --rate-table $T --workload phases --policy xinfer --duration 12 --warmup 4 --no-speed-probe"
for r in 8 16; do
  for arm in async:4,4,1 async:2,2,1 async:1,1,1 serial:4,4,1; do
    eng=${arm%%:*}; sl=${arm##*:}
    .venv/bin/xinfer-bench engine $E --robots $r --slots $sl --engine $eng --json "$out/${r}_${eng}_${sl}.json"
    [ $eng = async ] && .venv/bin/xinfer-bench engine $E --robots $r --slots $sl --engine async --shed-doomed --json "$out/d${r}_${eng}_${sl}.json"
  done
done
for seed in 1 2; do for r in 16 24; do
  for arm in plain doomed serial; do
    case $arm in plain) a="--engine async";; doomed) a="--engine async --shed-doomed";; serial) a="--engine serial";; esac
    .venv/bin/xinfer-bench engine $E --robots $r --slots 4,4,1 --seed $seed $a --json "$out/rep/${r}_${arm}_s$seed.json"
  done
done; done
C="--backend torch --model pi0-tiny --workload phases --duration 40 --warmup 10 --action-processes 2 --rate-table config/rate_table_cpu_pi0_tiny_batch4_factors.json --policy xinfer_batch_switch --slots 4,4,8 --max-batch 4 --robots 12"
for i in 1 2; do for a in sw dm; do
  [ $a = dm ] && x=--shed-doomed || x=
  .venv/bin/xinfer-bench engine $C $x --arm $a --json "$out/rep/cpu12_${a}_$i.json"
done; done
