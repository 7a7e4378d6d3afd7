"""Reference VLA model in torch + transformers: ViT, backbone prefill, action expert.

Public API (one request; see :mod:`xinfer_ros.model.stages` for the full picture)::

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
    "ChunkShapeError",
    "CommitLengthError",
    "ImageError",
    "InputError",
    "PreparedRequest",
    "RTCInputs",
    "ReferenceVLA",
    "RequestState",
    "StageOrderError",
    "StateError",
    "VLAConfig",
    "action",
    "count_stage_flops",
    "load_preset",
    "postprocess_actions",
    "prefill",
    "prepare_request",
    "run_request",
    "synthetic_inputs",
    "vit",
]

_LOCATIONS: dict[str, str] = {
    "ByteTokenizer": "tokenizer",
    "ChunkShapeError": "errors",
    "CommitLengthError": "errors",
    "ImageError": "errors",
    "InputError": "errors",
    "StateError": "errors",
    "PreparedRequest": "processing",
    "RTCInputs": "processing",
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
