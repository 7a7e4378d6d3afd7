"""The served models: transformers' π0 and the paper-shaped reference VLA.

Every model is served through one interface, :class:`~xinfer_ros.model.serving.
StageModel` (prepare on the CPU, ViT / Prefill / Action on the device, finish on the
CPU), built from a preset by :func:`~xinfer_ros.model.loading.load_stage_model`::

    from xinfer_ros.model import load_stage_model, model_io

    model = load_stage_model("pi0-tiny")        # or "pi0", model_path="/ckpt"
    state = model.prepare(images, instruction, joints, prev_chunk=prev, d=8, seed=7)
    model.vit(state); model.prefill(state); model.action(state)
    chunk = model.finish(state)                 # (H, D) float64, robot units

The π0 family lives in :mod:`xinfer_ros.model.pi0`. The reference VLA (``tiny``,
``vla-2b``, ``pi05``) keeps its own functional API (one request; see
:mod:`xinfer_ros.model.stages`)::

    from xinfer_ros.model import (ReferenceVLA, RequestState, load_preset,
                                  prepare_request, vit, prefill, action,
                                  postprocess_actions)

    model = ReferenceVLA.build(load_preset("tiny"))          # or .from_pretrained(dir)
    prepared = prepare_request(model.config, model.tokenizer, images, instruction,
                               state, prev_chunk=prev, d=8, seed=seed)   # CPU
    req = RequestState(prepared)
    vit(model, req); prefill(model, req); action(model, req)            # device
    chunk = postprocess_actions(req.actions, model.config, prepared.rtc)  # CPU, (H, D)

Attributes are imported lazily, so ``xinfer_ros.model.processing`` and
``xinfer_ros.model.config`` can be used (e.g. by a CPU preparation worker) without
importing torch.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = [
    "ByteTokenizer",
    "CheckpointError",
    "ChunkShapeError",
    "CommitLengthError",
    "ImageError",
    "InputError",
    "ModelError",
    "ModelIO",
    "PreparedRequest",
    "RTCInputs",
    "ReferenceVLA",
    "RequestState",
    "StageModel",
    "StageOrderError",
    "StateError",
    "VLAConfig",
    "action",
    "count_stage_flops",
    "load_preset",
    "load_stage_model",
    "model_io",
    "postprocess_actions",
    "prefill",
    "prepare_request",
    "run_request",
    "synthetic_inputs",
    "vit",
]

_LOCATIONS: dict[str, str] = {
    "ByteTokenizer": "tokenizer",
    "CheckpointError": "errors",
    "ChunkShapeError": "errors",
    "ModelError": "errors",
    "ModelIO": "presets",
    "model_io": "presets",
    "StageModel": "serving",
    "load_stage_model": "loading",
    "CommitLengthError": "errors",
    "ImageError": "errors",
    "InputError": "errors",
    "StateError": "errors",
    "PreparedRequest": "processing",
    "RTCInputs": "rtc_inputs",
    "postprocess_actions": "processing",
    "prepare_request": "processing",
    "ReferenceVLA": "vla",
    "RequestState": "request",
    "StageOrderError": "request",
    "VLAConfig": "config",
    "load_preset": "config",
    "action": "stages",
    "prefill": "stages",
    "run_request": "stages",
    "vit": "stages",
    "count_stage_flops": "flops",
    "synthetic_inputs": "synthetic",
}


def __getattr__(name: str) -> Any:
    """Import public attributes on first use (keeps torch out of CPU-only imports)."""
    module = _LOCATIONS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value
