"""Build the served model of a preset of any family (:func:`load_stage_model`)."""

from __future__ import annotations

from pathlib import Path

import torch

from xinfer_ros.model.presets import model_family
from xinfer_ros.model.serving import StageModel
from xinfer_ros.model.vla import resolve_dtype

__all__ = ["load_stage_model"]


def load_stage_model(preset: str | Path, *, model_path: str | Path | None = None,
                     device: str | torch.device = "cpu", dtype: str | torch.dtype | None = None,
                     seed: int | None = None, compile_mode: str = "off") -> StageModel:
    """Build the served model of a preset (any family).

    Args:
        preset: Preset name or YAML path.
        model_path: Checkpoint directory: a π0 checkpoint (either layout) for the pi0
            family, a ``save_pretrained`` directory of the reference family.
        device: ``cpu``, ``cuda``, ``cuda:N`` or ``meta`` (shapes only).
        dtype: Parameter dtype (the preset's when ``None``).
        seed: Seed of random weights (the preset's when ``None``).
        compile_mode: How the Action loop runs (:meth:`StageModel.set_compile`).

    Raises:
        CheckpointError: On an unusable checkpoint directory, tokenizer or statistics.
        FileNotFoundError: On an unknown preset.
        ValueError: On a compile mode the family does not have.
    """
    torch_dtype = resolve_dtype(dtype) if isinstance(dtype, str) else dtype
    family, loaded = model_family(preset)
    served = family.stage_model(loaded, model_path=model_path, device=device, dtype=torch_dtype,
                                seed=seed)
    served.set_compile(compile_mode)
    return served
