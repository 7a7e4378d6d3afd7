#!/usr/bin/env bash
# Round 1 at 6 and 8 robots again: a simulator run overlapped r1_unb_6, r1_fs_8 and
# r1_fsf_8 (06:56:40-06:59:19 UTC); the first runs of that round move to overlapped/.
set -u
R=/work/runs/f7
mkdir -p $R/overlapped
for n in 6 8; do for a in unb lane fs fsf; do mv $R/r1_${a}_$n.json $R/r1_${a}_$n.log $R/overlapped/ 2>/dev/null; done; done
source <(sed -n '/^arm()/,/^}/p' $R/block.sh)
cd /work/main
export ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST ROS_DOMAIN_ID=89
C="--backend torch --model pi0-tiny --workload phases --duration 40 --warmup 10 --action-processes 2 --compare-sim"
L=(unb lane fs fsf)
round=1; j=0
for robots in 6 8; do
  for i in 0 1 2 3; do arm ${L[$(( (i + round + j) % 4 ))]} $robots $round; done
  j=$((j + 1))
done
echo "$(date -u +%T) rerun done"
