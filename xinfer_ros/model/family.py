"""What a model family plugs in: how its presets load, what it takes, how it is served.

A family is one :class:`ModelFamily` object registered in
:data:`xinfer_ros.model.presets.FAMILY_REGISTRY` under the ``family`` key its preset
files name. Everything that works on "a preset of any family" (:func:`~xinfer_ros.
model.presets.model_io`, :func:`~xinfer_ros.model.loading.load_stage_model`) goes
through it, so adding a family is one module and one registry line. This module
imports neither torch nor any family.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from xinfer_ros.model.io import ModelIO

if TYPE_CHECKING:
    import torch

    from xinfer_ros.model.serving import StageModel

__all__ = ["ModelFamily", "PresetData", "PresetT"]

#: A preset file's top-level mapping as YAML parsed it (values of any YAML type; each
#: family's preset loader checks the keys it reads).
PresetData = Mapping[str, Any]

#: The preset object of one family (``VLAConfig``, ``Pi0Preset``).
PresetT = TypeVar("PresetT")


class ModelFamily(Protocol[PresetT]):
    """One model family behind the preset registry."""

    @property
    def name(self) -> str:
        """The ``family`` key of its preset files."""

    def load_preset(self, data: PresetData) -> PresetT:
        """The family's preset from a preset file's mapping (``family`` key included).

        Raises:
            ValueError: On unknown, missing or malformed keys.
        """

    def io(self, preset: PresetT, model_path: str | Path | None) -> ModelIO:
        """What the model of ``preset`` (and a checkpoint directory) takes and returns.

        Raises:
            ValueError: On an unusable checkpoint directory (``CheckpointError``).
        """

    def stage_model(self, preset: PresetT, *, model_path: str | Path | None,
                    device: str | torch.device, dtype: torch.dtype | None,
                    seed: int | None) -> StageModel:
        """The served model of ``preset`` (eager Action loop).

        Args:
            preset: The preset.
            model_path: Checkpoint directory overriding the preset's, if any.
            device: ``cpu``, ``cuda``, ``cuda:N`` or ``meta`` (shapes only).
            dtype: Parameter dtype (the preset's when ``None``).
            seed: Seed of random weights (the preset's when ``None``).

        Raises:
            CheckpointError: On an unusable checkpoint directory, tokenizer or statistics.
        """
