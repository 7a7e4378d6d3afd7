"""Model presets of every family, and what a served model takes and returns.

Presets live in ``config/models/<name>.yaml``. The ``family`` key says which model a
preset builds: ``reference`` (the default; :class:`~xinfer_ros.model.config.VLAConfig`,
the paper-shaped look-alike: ``tiny``, ``vla-2b``, ``pi05``) or ``pi0`` (transformers'
real π0, :class:`~xinfer_ros.model.pi0.preset.Pi0Preset`: ``pi0``, ``pi0-tiny``).

:func:`model_io` answers what the nodes, the openpi endpoint and the fleet runner need
to know about a model (cameras, state and action dimensions, chunk length) without
loading weights.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import yaml

from xinfer_ros.model.config import REFERENCE_FAMILY, VLAConfig, load_preset, preset_file

__all__ = [
    "COMPILE_MODES",
    "FAMILIES",
    "CameraIO",
    "ModelIO",
    "load_model_preset",
    "model_io",
    "preset_family",
    "reference_io",
]

#: Model families a preset may name.
FAMILIES: tuple[str, ...] = (REFERENCE_FAMILY, "pi0")

#: How a served model's Action loop runs: ``off`` eager; ``on`` the expert step under
#: ``torch.compile``; ``cudagraphs`` the same replayed as CUDA graphs (CUDA only). Only
#: the π0 family has a compiled loop.
COMPILE_MODES: tuple[str, ...] = ("off", "on", "cudagraphs")


@dataclasses.dataclass(frozen=True)
class CameraIO:
    """One model camera: its name and the model's input size in pixels."""

    name: str
    height: int
    width: int


@dataclasses.dataclass(frozen=True)
class ModelIO:
    """What a served model takes and returns.

    Attributes:
        name: Preset name.
        family: ``reference`` or ``pi0``.
        cameras: The model's cameras in request order.
        state_dim: The robot's state dimension.
        action_dim: The robot's action dimension D.
        horizon: Keyframes per chunk H.
        num_steps: Denoising steps K.
        masks_missing_cameras: A request may leave cameras out (π0 masks them); else
            every camera is required.
        resizes_images: Images of any size are resized with padding (π0); else the
            aspect ratio must match the camera's.
    """

    name: str
    family: str
    cameras: tuple[CameraIO, ...]
    state_dim: int
    action_dim: int
    horizon: int
    num_steps: int
    masks_missing_cameras: bool
    resizes_images: bool

    @property
    def action_shape(self) -> tuple[int, int]:
        """``(H, D)`` of a returned chunk."""
        return self.horizon, self.action_dim


def _raw(name_or_path: str | Path) -> dict[str, Any]:
    with preset_file(name_or_path).open(encoding="utf-8") as handle:
        data = yaml.safe_load(handle)
    if not isinstance(data, dict):
        raise ValueError(f"model preset {name_or_path!r} does not hold a mapping")
    return data


def preset_family(name_or_path: str | Path) -> str:
    """The family of a preset.

    Raises:
        FileNotFoundError: If there is no such preset.
        ValueError: On an unknown family.
    """
    family = str(_raw(name_or_path).get("family", REFERENCE_FAMILY))
    if family not in FAMILIES:
        raise ValueError(f"model preset {name_or_path!r}: unknown family {family!r}; "
                         f"known: {list(FAMILIES)}")
    return family


def load_model_preset(name_or_path: str | Path) -> Any:
    """A preset of any family: a ``VLAConfig`` or a ``Pi0Preset``.

    Raises:
        FileNotFoundError: If there is no such preset.
        ValueError: On an unknown family or a malformed file.
    """
    if preset_family(name_or_path) == REFERENCE_FAMILY:
        return load_preset(name_or_path)
    from xinfer_ros.model.pi0.preset import Pi0Preset

    return Pi0Preset.from_dict(_raw(name_or_path))


def reference_io(config: VLAConfig) -> ModelIO:
    """The :class:`ModelIO` of a reference-model configuration."""
    spec = config.action
    return ModelIO(
        name=config.name, family=REFERENCE_FAMILY,
        cameras=tuple(CameraIO(c.name, c.height, c.width) for c in config.cameras),
        state_dim=spec.state_dim, action_dim=spec.action_dim, horizon=spec.horizon,
        num_steps=spec.num_steps, masks_missing_cameras=False, resizes_images=False)


def model_io(name_or_path: str | Path, model_path: str | Path | None = None) -> ModelIO:
    """What the model of a preset (and checkpoint directory) takes and returns.

    Args:
        name_or_path: Preset name or YAML path.
        model_path: π0 checkpoint directory overriding the preset's (ignored by the
            reference family, which only loads its own directories).

    Raises:
        FileNotFoundError: If there is no such preset.
        ValueError: On a malformed preset; ``CheckpointError`` (a ``ValueError``) on an
            unusable π0 checkpoint directory.
    """
    preset = load_model_preset(name_or_path)
    if isinstance(preset, VLAConfig):
        return reference_io(preset)
    from xinfer_ros.model.pi0.preset import resolve_pi0

    return resolve_pi0(preset, model_path)[1].io()
