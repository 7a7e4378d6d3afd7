#!/bin/bash
# Phase spreading on (as config/fleet.yaml serves): unbatched XInfer on 1,1,2 (unb), the
# shipped switch (sw, band 0.92/0.88) and the switch with a higher band (swhi, ENTER and
# LEAVE, default 1.10/1.05), separate runs with the speed probe, the arms' order rotated
# each round: the shipped block's script with those arms. Run from the repository root:
#   OUT=/work/runs/band COUNTS="12 14" docs/data/cpu-2026-12-06-spread/band.sh
# then: xinfer-bench compare $OUT/*.json --candidate swhi [--figure goodput_rps]
# PY=DIR: import xinfer_ros from DIR (a snapshot of the tree).
ARMS="unb sw swhi" COUNTS="${COUNTS:-12 14}" EXTRA="--phase-spread" \
  exec "$(dirname "$0")/../cpu-2026-12-06-shipped/block.sh"
