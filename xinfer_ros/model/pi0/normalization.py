"""State and action normalisation of a π0 checkpoint (NumPy only).

A π0 policy sees its state and predicts its actions in normalised units, with the
statistics of the data set it was trained on. Three places may hold them:

* openpi: ``norm_stats.json`` (``{"norm_stats": {"state": {...}, "actions": {...}}}``
  with ``mean``/``std``/``q01``/``q99``) in the checkpoint directory or one
  ``assets/<name>/`` folder below it;
* lerobot: the normaliser step of ``policy_preprocessor.json``, whose ``state_file``
  (``*_normalizer_processor.safetensors``) holds ``observation.state.mean``,
  ``action.std``, … and whose ``norm_map`` gives the mode per feature type;
* a preset: ``normalization: {mode, state: {mean, std}, action: {...}}``.

Modes: ``mean_std`` (``(x − mean) / (std + eps)``), ``quantiles`` (``q01``/``q99``
mapped to ``[−1, 1]``) and ``identity``, which is never a fallback: it has to be
chosen by name.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import numpy as np

from xinfer_ros.model.errors import CheckpointError

__all__ = [
    "IDENTITY",
    "NORM_EPS",
    "NORM_MODES",
    "FeatureStats",
    "NormMode",
    "Normalizer",
    "find_checkpoint_stats",
    "normalizer_from_mapping",
]

NormMode = Literal["mean_std", "quantiles", "identity"]
#: Modes by name, as presets and the CLI write them.
NORM_MODES: tuple[str, ...] = ("mean_std", "quantiles", "identity")
#: Added to std (and to a zero quantile range) so a constant joint cannot divide by 0;
#: lerobot's and transformers' value.
NORM_EPS: float = 1e-8

#: openpi statistics file, and lerobot's pre-processor pipeline file.
OPENPI_STATS = "norm_stats.json"
LEROBOT_PIPELINE = "policy_preprocessor.json"
_LEROBOT_MODES = {"MEAN_STD": "mean_std", "QUANTILES": "quantiles", "IDENTITY": "identity"}
_STAT_KEYS = {"mean_std": ("mean", "std"), "quantiles": ("q01", "q99")}


@dataclasses.dataclass(frozen=True)
class FeatureStats:
    """Statistics of one feature (state or action), per dimension.

    Attributes:
        mode: How the feature is normalised.
        low: ``mean`` (mean_std) or ``q01`` (quantiles); empty for identity.
        high: ``std`` (mean_std) or ``q99`` (quantiles); empty for identity.
    """

    mode: NormMode
    low: np.ndarray
    high: np.ndarray

    @property
    def dim(self) -> int | None:
        """Length of the statistics (None for identity, which fits any length)."""
        return None if self.mode == "identity" else int(self.low.shape[0])

    def normalize(self, values: np.ndarray) -> np.ndarray:
        """Robot units -> model units (last axis is the feature's dimensions)."""
        if self.mode == "mean_std":
            return (values - self.low) / (self.high + NORM_EPS)
        if self.mode == "quantiles":
            return 2.0 * (values - self.low) / self._range() - 1.0
        return np.asarray(values, dtype=np.float64)

    def unnormalize(self, values: np.ndarray) -> np.ndarray:
        """Model units -> robot units (the inverse of :meth:`normalize`)."""
        if self.mode == "mean_std":
            return values * (self.high + NORM_EPS) + self.low
        if self.mode == "quantiles":
            return (values + 1.0) * 0.5 * self._range() + self.low
        return np.asarray(values, dtype=np.float64)

    def _range(self) -> np.ndarray:
        span = self.high - self.low
        return np.where(span == 0.0, NORM_EPS, span)


#: The identity "statistics" (fits any dimension).
IDENTITY = FeatureStats("identity", np.zeros(0), np.zeros(0))


@dataclasses.dataclass(frozen=True)
class Normalizer:
    """State and action statistics of one checkpoint.

    Attributes:
        state: Statistics of the robot state.
        action: Statistics of the actions.
        source: Where they came from (a file, ``preset <name>``, ``identity``).
    """

    state: FeatureStats
    action: FeatureStats
    source: str

    def check_dims(self, state_dim: int, action_dim: int) -> None:
        """Raise :class:`CheckpointError` unless the statistics fit the robot's dimensions."""
        for name, stats, dim in (("state", self.state, state_dim),
                                 ("action", self.action, action_dim)):
            if stats.dim is not None and stats.dim != dim:
                raise CheckpointError(
                    self.source, f"{name} statistics have {stats.dim} values but the robot's "
                                 f"{name} has {dim} dimensions")


def _vector(value: Any, where: str, key: str) -> np.ndarray:
    try:
        arr = np.asarray(value, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError) as exc:
        raise CheckpointError(where, f"{key} is not a numeric vector: {exc}") from exc
    if arr.size == 0 or not np.all(np.isfinite(arr)):
        raise CheckpointError(where, f"{key} is empty or holds NaN/Inf")
    return arr


def _feature(mode: str, stats: Mapping[str, Any] | None, where: str, name: str) -> FeatureStats:
    if mode not in NORM_MODES:
        raise CheckpointError(where, f"{name}: unknown normalisation mode {mode!r}; "
                                     f"choose one of {list(NORM_MODES)}")
    if mode == "identity":
        return IDENTITY
    low_key, high_key = _STAT_KEYS[mode]
    if not isinstance(stats, Mapping) or low_key not in stats or high_key not in stats:
        have = sorted(stats) if isinstance(stats, Mapping) else []
        raise CheckpointError(where, f"{name}: mode {mode} needs {low_key} and {high_key}; "
                                     f"found {have}")
    low = _vector(stats[low_key], where, f"{name}.{low_key}")
    high = _vector(stats[high_key], where, f"{name}.{high_key}")
    if low.shape != high.shape:
        raise CheckpointError(where, f"{name}: {low_key} has {low.size} values, "
                                     f"{high_key} {high.size}")
    if mode == "mean_std" and np.any(high < 0):
        raise CheckpointError(where, f"{name}.std has negative values")
    return FeatureStats(mode, low, high)  # type: ignore[arg-type]


def normalizer_from_mapping(data: Mapping[str, Any], source: str) -> Normalizer:
    """Build from a preset's ``normalization`` mapping.

    ``{mode: mean_std | quantiles | identity, state: {...}, action: {...}}``; ``mode``
    may also be given per feature inside ``state`` / ``action``.

    Raises:
        CheckpointError: On an unknown mode or missing, mismatched or non-finite stats.
    """
    default = str(data.get("mode", "mean_std"))
    features = {}
    for name in ("state", "action"):
        stats = data.get(name)
        mode = str(stats.get("mode", default)) if isinstance(stats, Mapping) else default
        features[name] = _feature(mode, stats, source, name)
    return Normalizer(features["state"], features["action"], source)


def _openpi_file(directory: Path) -> Path | None:
    direct = directory / OPENPI_STATS
    if direct.is_file():
        return direct
    found = sorted(directory.glob(f"assets/*/{OPENPI_STATS}"))
    if len(found) > 1:
        raise CheckpointError(directory, f"several {OPENPI_STATS} files "
                                         f"({[str(p.relative_to(directory)) for p in found]}); "
                                         "keep the one the robot was trained with")
    return found[0] if found else None


def _from_openpi(path: Path, mode: str) -> Normalizer:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        stats = data["norm_stats"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise CheckpointError(path, f"not an openpi norm_stats file: {exc!r}") from exc
    if not isinstance(stats, Mapping) or "state" not in stats or "actions" not in stats:
        raise CheckpointError(path, "norm_stats needs 'state' and 'actions' entries")
    return Normalizer(_feature(mode, stats["state"], str(path), "state"),
                      _feature(mode, stats["actions"], str(path), "actions"), str(path))


def _from_lerobot(directory: Path) -> Normalizer | None:
    pipeline = directory / LEROBOT_PIPELINE
    if not pipeline.is_file():
        return None
    try:
        steps = json.loads(pipeline.read_text(encoding="utf-8"))["steps"]
        step = next(s for s in steps if s.get("registry_name") == "normalizer_processor")
    except (OSError, ValueError, KeyError, TypeError, StopIteration) as exc:
        raise CheckpointError(pipeline, f"no normalizer_processor step: {exc!r}") from exc
    state_file = directory / str(step.get("state_file", ""))
    if not state_file.is_file():
        raise CheckpointError(pipeline, f"normaliser statistics {state_file.name!r} are missing")
    from safetensors.numpy import load_file

    flat = load_file(str(state_file))
    grouped: dict[str, dict[str, np.ndarray]] = {}
    for key, value in flat.items():
        feature, stat = key.rsplit(".", 1)
        grouped.setdefault(feature, {})[stat] = value
    norm_map = step.get("config", {}).get("norm_map", {})
    modes = {kind: _LEROBOT_MODES.get(str(norm_map.get(kind, "IDENTITY")))
             for kind in ("STATE", "ACTION")}
    for kind, mode in modes.items():
        if mode is None:
            raise CheckpointError(pipeline, f"{kind} normalisation {norm_map.get(kind)!r} is "
                                            f"not supported; use one of {list(_LEROBOT_MODES)}")
    where = str(state_file)
    return Normalizer(_feature(str(modes["STATE"]), grouped.get("observation.state"), where,
                               "observation.state"),
                      _feature(str(modes["ACTION"]), grouped.get("action"), where, "action"),
                      where)


def find_checkpoint_stats(directory: str | Path, mode: str = "mean_std") -> Normalizer | None:
    """Statistics shipped in a checkpoint directory, or ``None`` when it has none.

    lerobot's pre-processor files are read first (they name their own modes), then an
    openpi ``norm_stats.json`` (normalised with ``mode``).

    Raises:
        CheckpointError: When a statistics file is present but unusable.
    """
    root = Path(directory)
    lerobot = _from_lerobot(root)
    if lerobot is not None:
        return lerobot
    openpi = _openpi_file(root)
    return _from_openpi(openpi, mode) if openpi is not None else None
