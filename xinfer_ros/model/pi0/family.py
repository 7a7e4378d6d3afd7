"""The π0 family's entry in the preset registry (``pi0``, ``pi0-tiny``, a checkpoint).

transformers' ``PI0ForConditionalGeneration``: :class:`~xinfer_ros.model.pi0.preset.
Pi0Preset` presets resolved with a checkpoint directory (:func:`~xinfer_ros.model.pi0.
preset.resolve_pi0`), served by :class:`~xinfer_ros.model.serving.Pi0StageModel`. The
presets' module is imported on first use, torch only when a model is built.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING

from xinfer_ros.model.family import PresetData
from xinfer_ros.model.io import ModelIO
from xinfer_ros.model.pi0 import FAMILY

if TYPE_CHECKING:
    import torch

    from xinfer_ros.model.pi0.preset import Pi0Preset
    from xinfer_ros.model.serving import Pi0StageModel

__all__ = ["PI0", "Pi0Family"]


class Pi0Family:
    """transformers' π0 as a :class:`~xinfer_ros.model.family.ModelFamily`."""

    name = FAMILY

    def load_preset(self, data: PresetData) -> Pi0Preset:
        """See :meth:`ModelFamily.load_preset`."""
        from xinfer_ros.model.pi0.preset import Pi0Preset

        return Pi0Preset.from_dict(data)

    def io(self, preset: Pi0Preset, model_path: str | Path | None) -> ModelIO:
        """See :meth:`ModelFamily.io`: the checkpoint directory's robot, else the preset's."""
        from xinfer_ros.model.pi0.preset import resolve_pi0

        return resolve_pi0(preset, model_path)[1].io()

    def stage_model(self, preset: Pi0Preset, *, model_path: str | Path | None,
                    device: str | torch.device, dtype: torch.dtype | None,
                    seed: int | None) -> Pi0StageModel:
        """See :meth:`ModelFamily.stage_model`: a checkpoint (either layout) or seeded weights."""
        from xinfer_ros.model.pi0.checkpoint import build_model
        from xinfer_ros.model.pi0.preset import resolve_pi0
        from xinfer_ros.model.pi0.processing import Pi0Processor
        from xinfer_ros.model.pi0.tokenizer import load_tokenizer
        from xinfer_ros.model.serving import Pi0StageModel

        if seed is not None:
            preset = dataclasses.replace(preset, seed=int(seed))
        config, spec = resolve_pi0(preset, model_path)
        tokenizer = load_tokenizer(spec.tokenizer_path, spec.vocab_size)
        model = build_model(config, spec, device=device, dtype=dtype)
        return Pi0StageModel(model, Pi0Processor(spec, tokenizer))


#: The registry entry.
PI0 = Pi0Family()
