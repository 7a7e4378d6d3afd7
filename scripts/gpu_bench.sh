#!/usr/bin/env bash
# Engine benchmark on a lent GPU (issue 6): build vla-2b on CUDA, calibrate its rate
# table, and run the closed-loop engine benchmark at 8, 16 and 24 robots, async against
# serial. Writes under $OUT (at most 3 files): engine_bench.json (every run, the
# calibration and the environment), rate_table_vla-2b_cuda.json, gpu_bench.log.
#
#   bash scripts/gpu_bench.sh            # on the device machine, repository root; ~6 min
#   bash scripts/gpu_bench.sh --dry-run  # here: same steps, CPU, tiny preset, emulated
#                                        # benchmarks, about half a minute
#
# It never installs torch: it uses the machine's python3 (the device image ships a CUDA
# torch and transformers). If that transformers is older than the project's pin and
# breaks the model, download the pinned wheel here and carry it in .whl/:
#   echo /.whl/ >> .git/info/exclude
#   python3 -m pip download --no-deps --only-binary=:all: -d .whl transformers==5.24.0
# The script then installs .whl/*.whl into /tmp/site (--no-deps) and puts it first on
# PYTHONPATH. Environment knobs: DURATION (s per run, default 30), WARMUP (default 8),
# ROBOTS (default "8 16 24"), ENGINES (default "async serial"), PYTHON.
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
DURATION="${DURATION:-30}"
WARMUP="${WARMUP:-8}"
ROBOTS="${ROBOTS:-8 16 24}"
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
"$PYTHON" - "$DRY" <<'PY'
import sys
dry = sys.argv[1] == "1"
import torch, transformers, numpy, yaml, safetensors  # noqa: F401  (all needed)
print(f"[check] torch {torch.__version__} transformers {transformers.__version__} "
      f"numpy {numpy.__version__} cuda={torch.cuda.is_available()}")
if not dry:
    if not torch.cuda.is_available():
        sys.exit("[check] CUDA is not available: run with --dry-run off a GPU machine")
    print(f"[check] gpu {torch.cuda.get_device_name(0)}")
import xinfer_ros.engine, xinfer_ros.model.stages  # noqa: F401
print("[check] xinfer_ros imports ok")
# One tiny request through the engine on the target device: catches a transformers API
# mismatch in seconds instead of after the vla-2b build.
from xinfer_ros.engine import EngineConfig, StageEngine, make_backend
be = make_backend("torch", model="tiny", device="cpu" if dry else "cuda")
with StageEngine(be, "fifo", EngineConfig(slots=(1, 1, 1))) as eng:
    r = eng.submit(be.example_inputs(0, None), 60_000.0, "check").result(300)
assert r.ok and r.actions is not None and r.actions.shape == (16, 14), (r.status, r.reason)
print(f"[check] tiny request ok on {be.device}: {r.timings.total_ms:.1f} ms")
PY
if [[ $DRY == 0 ]]; then nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv || true; fi

ARGS=(--out "$OUT" --robots $ROBOTS --engines $ENGINES --duration "$DURATION" --warmup "$WARMUP")
if [[ $DRY == 1 ]]; then
  ARGS+=(--dry-run)
else
  ARGS+=(--model vla-2b --device cuda)
fi
# 7.5 minutes at most for the suite itself, so the whole command stays under 8.
timeout 450 "$PYTHON" -m xinfer_ros.cli.gpu_suite "${ARGS[@]}"

"$PYTHON" - "$OUT/engine_bench.json" <<'PY'
import json, sys
rep = json.load(open(sys.argv[1]))
runs = rep["summary"]
assert runs, "no benchmark runs"
for r in runs:
    assert r["throughput_rps"] > 0, r
print("[gpu_bench] robots engine   qps     p50_ms  p99_ms  attain  pred_mae_ms")
for r in runs:
    mae = r["prediction_mae_ms"]
    print(f"[gpu_bench] {r['robots']:>6} {r['engine']:<8} {r['throughput_rps']:7.2f} "
          f"{r['p50_ms']:7.1f} {r['p99_ms']:7.1f} {r['attainment'] * 100:6.1f}% "
          f"{mae if mae is None else round(mae, 2)}")
PY
echo "[gpu_bench] done in $(( $(date +%s) - T0 )) s; files: $(ls "$OUT" | tr '\n' ' ')"
