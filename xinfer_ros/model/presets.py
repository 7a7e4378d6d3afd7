"""Model presets of every family, and what a served model takes and returns.

Presets live in ``config/models/<name>.yaml``. The ``family`` key says which model a
preset builds: ``reference`` (the default; :class:`~xinfer_ros.model.config.VLAConfig`,
the paper-shaped look-alike: ``tiny``, ``vla-2b``, ``pi05``) or ``pi0`` (transformers'
real π0, :class:`~xinfer_ros.model.pi0.preset.Pi0Preset`: ``pi0``, ``pi0-tiny``).
Each family is one :class:`~xinfer_ros.model.family.ModelFamily` in
:data:`FAMILY_REGISTRY`, the only place a family is named.

:func:`model_io` answers what the nodes, the openpi endpoint and the fleet runner need
to know about a model (cameras, state and action dimensions, chunk length) without
loading weights.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from xinfer_ros.model.config import REFERENCE_FAMILY, preset_file
from xinfer_ros.model.family import ModelFamily, PresetData
from xinfer_ros.model.io import COMPILE_MODES, CameraIO, ModelIO, reference_io
from xinfer_ros.model.pi0.family import PI0
from xinfer_ros.model.reference_family import REFERENCE

__all__ = [
    "COMPILE_MODES",
    "FAMILIES",
    "FAMILY_REGISTRY",
    "CameraIO",
    "ModelIO",
    "load_model_preset",
    "model_family",
    "model_io",
    "preset_family",
    "reference_io",
]

#: Every model family by the ``family`` key of its presets.
FAMILY_REGISTRY: Mapping[str, ModelFamily[Any]] = {f.name: f for f in (REFERENCE, PI0)}

#: Model families a preset may name.
FAMILIES: tuple[str, ...] = tuple(FAMILY_REGISTRY)


def _raw(name_or_path: str | Path) -> PresetData:
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
    return _family_of(name_or_path, _raw(name_or_path)).name


def _family_of(name_or_path: str | Path, data: PresetData) -> ModelFamily[Any]:
    family = str(data.get("family", REFERENCE_FAMILY))
    if family not in FAMILY_REGISTRY:
        raise ValueError(f"model preset {name_or_path!r}: unknown family {family!r}; "
                         f"known: {list(FAMILIES)}")
    return FAMILY_REGISTRY[family]


def model_family(name_or_path: str | Path) -> tuple[ModelFamily[Any], Any]:
    """A preset's family and its preset object, which only that family reads.

    Raises:
        FileNotFoundError: If there is no such preset.
        ValueError: On an unknown family or a malformed file.
    """
    data = _raw(name_or_path)
    family = _family_of(name_or_path, data)
    return family, family.load_preset(data)


def load_model_preset(name_or_path: str | Path) -> object:
    """A preset of any family: a ``VLAConfig``, a ``Pi0Preset``, ...

    Raises:
        FileNotFoundError: If there is no such preset.
        ValueError: On an unknown family or a malformed file.
    """
    return model_family(name_or_path)[1]


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
    family, preset = model_family(name_or_path)
    return family.io(preset, model_path)
