#!/usr/bin/env bash
# Engine benchmark on a lent GPU: build the real-shape pi0 preset on CUDA in bfloat16
# (random weights; the flow stays float32) and run the closed-loop engine benchmark with
# the torch backend in three groups, each on a rate table calibrated the way it serves:
#   1. the Action loop as CUDA graphs on one Action lane, async on slots 4,4,1, 2,2,1,
#      1,1,1 and 4,4,1 shedding doomed requests (EngineConfig.shed_doomed) against
#      serial at 8 and 16 robots (the first H200 run found the eager Action
#      unit launch-bound at about 0.5 s and CUDA graphs 13x faster; on one H100 async on
#      4,4,1 answered nothing from 16 robots where serial served 6 a second:
#      docs/BENCHMARKS.md 1.4, 1.5);
#   2. eager, async against serial (no robot count by default: measured on three leases);
#   3. eager async with batches of up to 4 units per stage at 16 robots: one run of the
#      saturation switch the shipped configuration serves, pinned unbatched, pinned
#      batched and on its meter in turn every 2 s (4 cycles), the arms compared cycle
#      by cycle within the run (xinfer-bench engine --interleave).
# A group that fails is recorded under "errors" in the JSON and the next group runs.
# Writes under $OUT (at most 5 files): engine_bench.json (every run so far, the
# calibrations and the environment), rate_table_pi0_cuda_cudagraphs.json,
# rate_table_pi0_cuda.json, rate_table_pi0_cuda_batch4.json, gpu_bench.log.
#
#   bash scripts/gpu_bench.sh            # on the device machine, repository root
#   bash scripts/gpu_bench.sh --dry-run  # here and in CI: the same code with the torch
#                                        # backend, pi0-tiny in bfloat16 on the CPU,
#                                        # 2 and 4 robots, torch.compile standing in for
#                                        # CUDA graphs, about a minute
#
# It never installs torch: it uses the machine's python3 (the device image ships a CUDA
# torch and transformers). The image's transformers (5.17 on 2026-12-04) is older than
# the project's pin; download the pinned wheel here and carry it in .whl/:
#   echo /.whl/ >> .git/info/exclude
#   python3 -m pip download --no-deps --only-binary=:all: -d .whl transformers==5.24.0
# The script then installs .whl/*.whl into /tmp/site (--no-deps) and puts it first on
# PYTHONPATH. Environment knobs: MODEL (default pi0), DTYPE (default bfloat16),
# DURATION (s per run, default 12), WARMUP (default 4), ROBOTS (default "8 16"),
# ENGINES (default "async serial"), COMPILE (group 1: cudagraphs, on or off; off runs
# every count eager), COMPILED_SLOTS (group 1's async layouts, default
# "4,4,1 2,2,1 1,1,1"), DOOMED_SLOTS (group 1's shed_doomed layouts, default "4,4,1"),
# EAGER_ROBOTS (group 2, default none, e.g. "16"), MAX_BATCH
# (group 3, default 4; 1: none), ARM_ROBOTS (group 3, default "16"), INTERLEAVE (group 3's
# segment, s, default 2; 0: one lane-batched run instead), PYTHON.
# The 2026-12-04 run (eager only) took 402 s, the device's start not counted; the
# 2026-12-06 H100 run (then with 24 and 32 robots and the eager group) hit the suite's
# 450 s timeout in group 3; these defaults should end about 50 s before it (build 18 s,
# compile 75 s, calibrations about 150 s, 11 runs of about 13 s).
set -euo pipefail

cd "$(dirname "$0")/.."
DRY=0
[[ "${1:-}" == "--dry-run" ]] && DRY=1
OUT="${OUT:-out/gpu_bench}"
mkdir -p "$OUT"
LOG="$OUT/gpu_bench.log"
exec > >(tee "$LOG") 2>&1

if [[ -z "${PYTHON:-}" ]]; then
  if [[ $DRY == 1 && -x .venv/bin/python ]]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
DURATION="${DURATION:-12}"
WARMUP="${WARMUP:-4}"
MAX_BATCH="${MAX_BATCH:-4}"
COMPILE="${COMPILE:-cudagraphs}"
EAGER_ROBOTS="${EAGER_ROBOTS-}"
COMPILED_SLOTS="${COMPILED_SLOTS:-4,4,1 2,2,1 1,1,1}"
DOOMED_SLOTS="${DOOMED_SLOTS-4,4,1}"
ARM_ROBOTS="${ARM_ROBOTS-16}"
INTERLEAVE="${INTERLEAVE:-2}"
ROBOTS="${ROBOTS:-8 16}"
MODEL="${MODEL:-pi0}"
DTYPE="${DTYPE:-bfloat16}"
ENGINES="${ENGINES:-async serial}"
T0=$(date +%s)

if compgen -G ".whl/*.whl" >/dev/null; then
  echo "[gpu_bench] installing carried wheels: $(ls .whl)"
  "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl
  export PYTHONPATH="/tmp/site:$PYTHONPATH"
fi

echo "[gpu_bench] $(date -u +%FT%TZ) dry_run=$DRY python=$PYTHON out=$OUT"
# Self-check: the environment, before spending minutes on a model build.
"$PYTHON" - "$DRY" "$DTYPE" <<'PY'
import sys
dry, dtype = sys.argv[1] == "1", sys.argv[2]
import torch, transformers, numpy, yaml, safetensors  # noqa: F401  (all needed)
print(f"[check] torch {torch.__version__} transformers {transformers.__version__} "
      f"numpy {numpy.__version__} cuda={torch.cuda.is_available()}")
if not dry:
    if not torch.cuda.is_available():
        sys.exit("[check] CUDA is not available: run with --dry-run off a GPU machine")
    print(f"[check] gpu {torch.cuda.get_device_name(0)}")
import xinfer_ros.engine, xinfer_ros.model.stages  # noqa: F401
print("[check] xinfer_ros imports ok")
# One pi0-tiny request (transformers' PI0, the served family) through the engine on the
# target device and dtype: catches a transformers API or dtype mismatch in seconds
# instead of after the pi0 build.
from xinfer_ros.engine import EngineConfig, StageEngine, make_backend
be = make_backend("torch", model="pi0-tiny", device="cpu" if dry else "cuda", dtype=dtype)
with StageEngine(be, "fifo", EngineConfig(slots=(1, 1, 1))) as eng:
    r = eng.submit(be.example_inputs(0, None), 60.0, "check").result(300)
assert r.ok and r.actions is not None and r.actions.shape == be.action_shape, (r.status, r.reason)
print(f"[check] pi0-tiny request ok on {be.device} in {dtype}: {r.timings.total_ms:.1f} ms")
PY
if [[ $DRY == 0 ]]; then nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv || true; fi

ARGS=(--out "$OUT" --robots $ROBOTS --engines $ENGINES --duration "$DURATION" --warmup "$WARMUP"
      --dtype "$DTYPE" --max-batch "$MAX_BATCH" --compile "$COMPILE" --compiled-slots $COMPILED_SLOTS
      --doomed-slots $DOOMED_SLOTS
      --eager-robots $EAGER_ROBOTS --arm-robots $ARM_ROBOTS --interleave "$INTERLEAVE")
if [[ $DRY == 1 ]]; then
  ARGS+=(--dry-run)
else
  ARGS+=(--model "$MODEL" --device cuda)
fi
# 7.5 minutes at most for the suite itself, so the whole command stays under 8. A suite
# cut short has written every run it finished: summarise those, then fail.
rc=0
timeout 450 "$PYTHON" -m xinfer_ros.cli.gpu_suite "${ARGS[@]}" || rc=$?

"$PYTHON" - "$OUT/engine_bench.json" <<'PY'
import json, sys
rep = json.load(open(sys.argv[1]))
runs = rep["summary"]
assert runs, "no benchmark runs"
# A run that answers nothing in time is a measurement (eager pi0 on 2026-12-04), but a
# suite in which no run answered anything is broken.
assert any(r["throughput_rps"] > 0 for r in runs), runs
assert all(run["backend"]["backend"] == "torch" for run in rep["runs"]), "a run was not torch"
if "compile_error" in rep:
    print(f"[gpu_bench] compiled arm skipped: {rep['compile_error']}")
print(f"[gpu_bench] robots {'engine':<26} qps     p50_ms  p99_ms  attain  pred_mae_ms")
for r in runs:
    mae = r["prediction_mae_ms"]
    print(f"[gpu_bench] {r['robots']:>6} {r['engine']:<26} {r['throughput_rps']:7.2f} "
          f"{r['p50_ms']:7.1f} {r['p99_ms']:7.1f} {r['attainment'] * 100:6.1f}% "
          f"{mae if mae is None else round(mae, 2)}")
PY
echo "[gpu_bench] done in $(( $(date +%s) - T0 )) s (suite status $rc); files: $(ls "$OUT" | tr '\n' ' ')"
exit "$rc"
