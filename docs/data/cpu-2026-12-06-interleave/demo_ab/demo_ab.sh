#!/bin/bash
# make demo's fleet at equal budgets (x1.21): the shipped configuration (switch) against
# the previous one (db32243's config/fleet.yaml: unbatched xinfer on 1,1,2), ABBA; run as
# ./demo_ab.sh (new old old new, 10:08-10:13 UTC) and START=4 ARMS="old new new old"
# ./demo_ab.sh (10:13-10:19), on c421298. Outputs went to /work/runs/demo_ab/.
cd /work/main; n=${START:-0}
for arm in ${ARMS:-new old old new}; do
  if [ $arm = new ]; then
    ./env.sh python -m xinfer_ros.cli.fleet --no-progress --json /work/runs/demo_ab/$arm$((++n)).json --out /work/runs/demo_ab/out_$arm$n > /work/runs/demo_ab/$arm$n.log 2>&1
  else
    ./env.sh python -m xinfer_ros.cli.fleet --no-progress --config docs/data/cpu-2026-12-06-interleave/demo_ab/fleet_db32243.yaml --budget-scale 1.21 --json /work/runs/demo_ab/$arm$((++n)).json --out /work/runs/demo_ab/out_$arm$n > /work/runs/demo_ab/$arm$n.log 2>&1
  fi
  echo "$(date +%T) $arm$n rc=$?"
done
