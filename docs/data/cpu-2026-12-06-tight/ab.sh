#!/bin/bash
# The saturation switch (sw) against the switch with tight_alone (swt,
# xinfer_batch_switch_tight) at phases 12, separate runs, the order alternating
# round by round, the shipped table, a speed probe beside each run. From the repository
# root: OUT=DIR ROUNDS=4 docs/data/cpu-2026-12-06-tight/ab.sh, then
# xinfer-bench compare DIR/*.json --candidate swt [--figure goodput_rps].
# ARMS="unb sw" ROUNDS=6: unbatched XInfer on 1,1,2 against the switch instead.
# COUNTS="12 24": robot counts; TABLE=FILE: another rate table; EXTRA: more options for
# every run (e.g. "--compile on", docs/data/cpu-2026-12-06-compile/).
set -u
out=${OUT:?}; mkdir -p "$out"
export ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST ROS_DOMAIN_ID=72
C="--backend torch --model pi0-tiny --workload ${WL:-phases} --duration 40 --warmup 10 --action-processes 2 --rate-table ${TABLE:-config/rate_table_cpu_pi0_tiny_batch4_factors.json} ${EXTRA:-}"
read -r a b <<< "${ARMS:-sw swt}"  # ARMS="unb sw": the goodput block
orders=("$a $b" "$b $a" "$a $b" "$b $a" "$a $b" "$b $a")
for robots in ${COUNTS:-12}; do
  for round in $(seq 0 $((${ROUNDS:-3} - 1))); do
    for a in ${orders[$round]}; do
      case $a in
        unb) args="--policy xinfer --slots 1,1,2";;
        sw) args="--policy xinfer_batch_switch --slots 4,4,8 --max-batch 4";;
        swt) args="--policy xinfer_batch_switch_tight --slots 4,4,8 --max-batch 4";;
      esac
      name=p${robots}_r$((round + 1))_$a
      .venv/bin/xinfer-bench engine $C --robots $robots $args --arm $a --json "$out/$name.json" > "$out/$name.log" 2>&1
      echo "$(date +%T) $name rc=$?"
    done
  done
done
echo DONE
