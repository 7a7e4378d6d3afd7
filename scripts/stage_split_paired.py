"""The stage split's own cost: three stage units against one ``sample_actions`` call.

One process, one torch thread (as ``xinfer-serve`` runs a lane), no engine: one request
prepared once, then, alternately, (a) transformers' ``sample_actions`` on its tensors
(what the peer servers call after the same preparation: ``model_inputs``, the seeded
noise, one call) and (b) the torch backend's ViT, Prefill and Action units run back to
back on a fresh state of the same request (``TorchBackend.run_stage``, as the engine's
lanes and its fast path call it). The two arms swap order every pair; each pair gives
the ratio and the difference (b) − (a), in wall time and in the thread's CPU time
(``time.thread_time``: with one torch thread all the work runs on the calling thread,
and time spent waiting for a core, which other work on a shared host causes, is left
out). Their medians are the split's cost; the fastest call of each arm, which no
other work delayed, is printed beside. Both chunks are checked bit for bit first.

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
    wall: dict[str, list[float]] = {k: [] for k in arms}
    cpu: dict[str, list[float]] = {k: [] for k in arms}
    names = list(arms)
    for i in range(args.pairs):
        for name in (names if i % 2 == 0 else names[::-1]):
            t0, c0 = time.perf_counter(), time.thread_time()
            arms[name]()
            cpu[name].append((time.thread_time() - c0) * 1e3)
            wall[name].append((time.perf_counter() - t0) * 1e3)
    print("  stage units (wall): " + " + ".join(
        f"{s.name} {statistics.median(ms):.2f}" for s, ms in per_stage.items()) + " ms")
    for label, times in (("wall", wall), ("CPU", cpu)):
        _report(label, times)
    print("load average (1, 5, 15 min): before " + " ".join(f"{x:.2f}" for x in load0)
          + ", after " + " ".join(f"{x:.2f}" for x in os.getloadavg()))
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}, "
          f"numpy {np.__version__}")


def _report(label: str, times: dict[str, list[float]]) -> None:
    """Medians per arm, the paired ratio and difference with their quartiles."""
    ratio = [b / a for a, b in zip(times["sample_actions"], times["stages"], strict=True)]
    delta = [b - a for a, b in zip(times["sample_actions"], times["stages"], strict=True)]
    q, d = statistics.quantiles(ratio, n=4), statistics.quantiles(delta, n=4)
    print(f"{label}: sample_actions {statistics.median(times['sample_actions']):.2f} ms, "
          f"stages {statistics.median(times['stages']):.2f} ms (medians; fastest "
          f"{min(times['sample_actions']):.2f} / {min(times['stages']):.2f}); paired ratio "
          f"{statistics.median(ratio):.4f} (quartiles {q[0]:.4f} / {q[2]:.4f}), "
          f"difference {statistics.median(delta):+.2f} ms ({d[0]:+.2f} / {d[2]:+.2f}), "
          f"{len(ratio)} pairs")


if __name__ == "__main__":
    main()
