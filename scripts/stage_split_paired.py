"""The stage split's own cost: three stage units against one ``sample_actions`` call.

One process, one torch thread (as ``xinfer-serve`` runs a lane), no engine: one request
prepared once, then, alternately, (a) transformers' ``sample_actions`` on its tensors
(what the peer servers call after the same preparation: ``model_inputs``, the seeded
noise, one call) and (b) the torch backend's ViT, Prefill and Action units run back to
back on a fresh state of the same request (``TorchBackend.run_stage``, as the engine's
lanes and its fast path call it). The two arms swap order every pair; each pair gives
the ratio and the difference (b) − (a), whose medians are robust to load from other
work on the host. Both chunks are checked bit for bit first.

    python scripts/stage_split_paired.py --pairs 200

Run against another checkout (same arguments) for a before/after:
``/work/wt/run.sh <checkout> python <this file>``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from xinfer_ros.core.stages import Stage
from xinfer_ros.engine.backends.torch_backend import TorchBackend
from xinfer_ros.model.pi0 import stages

_STAGES = (Stage.VIT, Stage.PREFILL, Stage.ACTION)


def main() -> None:
    """Run the paired comparison; print medians, paired ratio and difference."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=200)
    ap.add_argument("--model", default="pi0-tiny")
    args = ap.parse_args()
    load0 = os.getloadavg()
    backend = TorchBackend(model=args.model, device="cpu", threads=1)
    served: Any = backend.model
    module = served.module
    inputs = backend.example_inputs(0, None)
    prepared = backend.prepare(inputs, 1, "paired").prepared  # type: ignore[attr-defined]
    per_stage: dict[Stage, list[float]] = {s: [] for s in _STAGES}

    def split() -> torch.Tensor:
        state = stages.Pi0State(prepared)
        for stage in _STAGES:
            t0 = time.perf_counter()
            backend.run_stage(stage, state, None)
            per_stage[stage].append((time.perf_counter() - t0) * 1e3)
        assert state.actions is not None
        return state.actions

    def sample() -> torch.Tensor:
        tensors = stages.model_inputs(module, prepared)
        with torch.no_grad():
            out: torch.Tensor = module.sample_actions(
                state=tensors.state, input_ids=tensors.input_ids,
                pixel_values=tensors.pixel_values,
                noise=stages.sample_noise(module, prepared.seed),
                attention_mask=tensors.attention_mask,
                pixel_attention_mask=tensors.pixel_attention_mask)
        return out

    diff = (split() - sample()).abs().max().item()
    print(f"chunks: max |split - sample_actions| = {diff} (bit-identical: {diff == 0.0})")
    arms: dict[str, Callable[[], torch.Tensor]] = {"sample_actions": sample, "stages": split}
    for _ in range(5):
        for call in arms.values():
            call()
    for s in _STAGES:
        per_stage[s].clear()
    times: dict[str, list[float]] = {k: [] for k in arms}
    names = list(arms)
    for i in range(args.pairs):
        for name in (names if i % 2 == 0 else names[::-1]):
            t0 = time.perf_counter()
            arms[name]()
            times[name].append((time.perf_counter() - t0) * 1e3)
    _report(times, per_stage, load0)


def _report(times: dict[str, list[float]], per_stage: dict[Stage, list[float]],
            load0: tuple[float, float, float]) -> None:
    """Medians per arm and stage, the paired ratio and difference with their quartiles."""
    ratio = [b / a for a, b in zip(times["sample_actions"], times["stages"], strict=True)]
    delta = [b - a for a, b in zip(times["sample_actions"], times["stages"], strict=True)]
    for name, ms in times.items():
        print(f"{name:15} median {statistics.median(ms):7.2f} ms")
    print("  stage units: " + " + ".join(
        f"{s.name} {statistics.median(ms):.2f}" for s, ms in per_stage.items()) + " ms")
    q = statistics.quantiles(ratio, n=4)
    d = statistics.quantiles(delta, n=4)
    print(f"paired ratio stages / sample_actions: median {statistics.median(ratio):.4f} "
          f"(quartiles {q[0]:.4f} / {q[2]:.4f}), {len(ratio)} pairs")
    print(f"paired difference: median {statistics.median(delta):+.2f} ms "
          f"(quartiles {d[0]:+.2f} / {d[2]:+.2f})")
    print("load average (1, 5, 15 min): before " + " ".join(f"{x:.2f}" for x in load0)
          + ", after " + " ".join(f"{x:.2f}" for x in os.getloadavg()))
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}, "
          f"numpy {np.__version__}")


if __name__ == "__main__":
    main()
