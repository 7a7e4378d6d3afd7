"""The reference family's entry in the preset registry (``tiny``, ``vla-2b``, ``pi05``).

The paper-shaped look-alike VLA: :class:`~xinfer_ros.model.config.VLAConfig` presets,
served by :class:`~xinfer_ros.model.serving.ReferenceStageModel`. torch is imported
only when a model is built.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

from xinfer_ros.model.config import REFERENCE_FAMILY, VLAConfig
from xinfer_ros.model.family import PresetData
from xinfer_ros.model.io import ModelIO, reference_io

if TYPE_CHECKING:
    import torch

    from xinfer_ros.model.serving import ReferenceStageModel
    from xinfer_ros.model.vla import ReferenceVLA

__all__ = ["REFERENCE", "ReferenceFamily"]

_LOG = logging.getLogger("xinfer_ros.model")


class ReferenceFamily:
    """The reference VLA as a :class:`~xinfer_ros.model.family.ModelFamily`."""

    name = REFERENCE_FAMILY

    def load_preset(self, data: PresetData) -> VLAConfig:
        """See :meth:`ModelFamily.load_preset`."""
        return VLAConfig.from_dict({k: v for k, v in data.items() if k != "family"})

    def io(self, preset: VLAConfig, model_path: str | Path | None) -> ModelIO:
        """See :meth:`ModelFamily.io` (``model_path`` plays no part: shapes are the preset's)."""
        return reference_io(preset)

    def stage_model(self, preset: VLAConfig, *, model_path: str | Path | None,
                    device: str | torch.device, dtype: torch.dtype | None,
                    seed: int | None) -> ReferenceStageModel:
        """See :meth:`ModelFamily.stage_model`: a ``save_pretrained`` directory or seeds."""
        from xinfer_ros.model.serving import ReferenceStageModel
        from xinfer_ros.model.vla import ReferenceVLA

        if model_path:
            return ReferenceStageModel(ReferenceVLA.from_pretrained(model_path, device=device,
                                                                    dtype=dtype))
        return ReferenceStageModel(_build(preset, device, seed, dtype))


def _build(config: VLAConfig, device: str | torch.device, seed: int | None,
           dtype: torch.dtype | None) -> ReferenceVLA:
    """Seeded reference weights; on CUDA initialised on the device.

    ``ReferenceVLA.build`` initialises on the CPU and then moves the weights, which
    takes minutes for ``vla-2b``; under a CUDA default device the same code
    initialises on the GPU in seconds (different random values, same shapes, still
    seeded). Falls back to the CPU path if the device build fails.
    """
    import torch

    from xinfer_ros.model.vla import ReferenceVLA

    if str(device).startswith("cuda"):
        try:
            with torch.device(device):
                return ReferenceVLA.build(config, device=device, seed=seed, dtype=dtype)
        except (RuntimeError, TypeError, ValueError) as exc:  # pragma: no cover - CUDA only
            _LOG.warning("on-device build failed (%s); building on the CPU", exc)
    return ReferenceVLA.build(config, device=device, seed=seed, dtype=dtype)


#: The registry entry.
REFERENCE = ReferenceFamily()
