"""State and action normalisation of a π0 checkpoint (NumPy only).

A π0 policy sees its state and predicts its actions in normalised units, with the
statistics of the data set it was trained on. Four places may hold them:

* lerobot: the normaliser step of ``policy_preprocessor.json`` and the unnormaliser
  step of ``policy_postprocessor.json`` (read by :mod:`.lerobot_pipeline`);
* openpi: ``norm_stats.json`` (``{"norm_stats": {"state": {...}, "actions": {...}}}``
  with ``mean``/``std``/``q01``/``q99``) in the checkpoint directory or one
  ``assets/<name>/`` folder below it;
* transformers: ``processor_config.json`` of a saved ``PI0Processor``
  (``state_mean``, ``state_std``, ``actions_mean``, ``actions_std``);
* a preset: ``normalization: {mode, state: {mean, std}, action: {...}}``.

Modes: ``mean_std``, ``min_max`` (``min``/``max`` mapped to ``[−1, 1]``), ``quantiles``
(``q01``/``q99``), ``quantile10`` (``q10``/``q90``) and ``identity``, which is never a
fallback: it has to be chosen by name.

Each source applies its statistics its own way (:class:`NormConvention`): openpi adds
its epsilon 1e-6 to every std and every quantile range, in both directions; lerobot
adds its 1e-8 to the std when normalising only and substitutes it for a zero range;
transformers' ``PI0Processor`` adds 1e-8 to the std (it has no inverse; ours adds it
back). On a zero-variance joint these differ, so the convention travels with the
statistics.
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
    "CONVENTIONS",
    "IDENTITY",
    "LEROBOT",
    "NORM_MODES",
    "OPENPI",
    "OPENPI_STATS",
    "TRANSFORMERS",
    "TRANSFORMERS_PROCESSOR",
    "FeatureStats",
    "NormConvention",
    "NormMode",
    "Normalizer",
    "feature_stats",
    "find_checkpoint_stats",
    "normalizer_from_mapping",
]

NormMode = Literal["mean_std", "min_max", "quantiles", "quantile10", "identity"]
#: Modes by name, as presets and the CLI write them.
NORM_MODES: tuple[str, ...] = ("mean_std", "min_max", "quantiles", "quantile10", "identity")
#: The statistics each mode reads: (low, high).
STAT_KEYS: dict[str, tuple[str, str]] = {
    "mean_std": ("mean", "std"), "min_max": ("min", "max"),
    "quantiles": ("q01", "q99"), "quantile10": ("q10", "q90")}

#: openpi statistics file, and transformers' saved processor (with its statistics).
OPENPI_STATS = "norm_stats.json"
TRANSFORMERS_PROCESSOR = "processor_config.json"


@dataclasses.dataclass(frozen=True)
class NormConvention:
    """How one source of statistics applies them.

    Attributes:
        name: The source (``lerobot``, ``openpi``, ``transformers``).
        eps: Its epsilon.
        eps_in_unnormalize: mean_std: the inverse multiplies by ``std + eps`` (else
            by ``std``).
        eps_on_every_range: Range modes add ``eps`` to every range (else they replace
            a zero range by ``eps``).
    """

    name: str
    eps: float
    eps_in_unnormalize: bool
    eps_on_every_range: bool


#: lerobot's ``_NormalizationMixin`` (normalize_processor.py): default eps 1e-8 (a
#: pipeline file may state another), ``(x − mean) / (std + eps)`` but ``x · std + mean``
#: back, a zero range replaced by eps.
LEROBOT = NormConvention("lerobot", 1e-8, eps_in_unnormalize=False, eps_on_every_range=False)
#: openpi's ``Normalize`` / ``Unnormalize`` (transforms.py): 1e-6 on every std and range.
OPENPI = NormConvention("openpi", 1e-6, eps_in_unnormalize=True, eps_on_every_range=True)
#: transformers' ``PI0Processor.normalize``: ``(x − mean) / (std + 1e-8)``; also what a
#: preset's own statistics use.
TRANSFORMERS = NormConvention("transformers", 1e-8, eps_in_unnormalize=True,
                              eps_on_every_range=False)
CONVENTIONS: dict[str, NormConvention] = {c.name: c for c in (LEROBOT, OPENPI, TRANSFORMERS)}


@dataclasses.dataclass(frozen=True)
class FeatureStats:
    """Statistics of one feature (state or action), per dimension.

    Attributes:
        mode: How the feature is normalised.
        low: ``mean`` (mean_std) or the range's lower end; empty for identity.
        high: ``std`` (mean_std) or the range's upper end; empty for identity.
        convention: How the source applies them (its epsilon).
    """

    mode: NormMode
    low: np.ndarray
    high: np.ndarray
    convention: NormConvention = TRANSFORMERS

    @property
    def dim(self) -> int | None:
        """Length of the statistics (None for identity, which fits any length)."""
        return None if self.mode == "identity" else int(self.low.shape[0])

    def normalize(self, values: np.ndarray) -> np.ndarray:
        """Robot units -> model units (last axis is the feature's dimensions)."""
        if self.mode == "identity":
            return np.asarray(values, dtype=np.float64)
        out: np.ndarray
        if self.mode == "mean_std":
            out = (values - self.low) / (self.high + self.convention.eps)
        else:
            out = 2.0 * (values - self.low) / self._range() - 1.0
        return out

    def unnormalize(self, values: np.ndarray) -> np.ndarray:
        """Model units -> robot units (the inverse of :meth:`normalize`)."""
        if self.mode == "identity":
            return np.asarray(values, dtype=np.float64)
        out: np.ndarray
        if self.mode == "mean_std":
            eps = self.convention.eps if self.convention.eps_in_unnormalize else 0.0
            out = values * (self.high + eps) + self.low
        else:
            out = (values + 1.0) * 0.5 * self._range() + self.low
        return out

    def _range(self) -> np.ndarray:
        span = self.high - self.low
        if self.convention.eps_on_every_range:
            padded: np.ndarray = span + self.convention.eps
            return padded
        return np.where(span == 0.0, self.convention.eps, span)


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


def _vector(value: object, where: str, key: str) -> np.ndarray:
    try:
        arr = np.asarray(value, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError) as exc:
        raise CheckpointError(where, f"{key} is not a numeric vector: {exc}") from exc
    if arr.size == 0 or not np.all(np.isfinite(arr)):
        raise CheckpointError(where, f"{key} is empty or holds NaN/Inf")
    return arr


def feature_stats(mode: str, stats: Mapping[str, object] | None, where: str, name: str,
                  convention: NormConvention) -> FeatureStats:
    """One feature's statistics, checked.

    Args:
        mode: One of :data:`NORM_MODES`.
        stats: The feature's statistics by name (``mean``, ``std``, ``q01``, ...).
        where: The file (or preset) they come from, for errors.
        name: The feature, for errors (``observation.state``, ``actions``, ...).
        convention: How their source applies them.

    Raises:
        CheckpointError: On an unknown mode, or missing, mismatched or non-finite stats.
    """
    if mode not in NORM_MODES:
        raise CheckpointError(where, f"{name}: unknown normalisation mode {mode!r}; "
                                     f"choose one of {list(NORM_MODES)}")
    if mode == "identity":
        return IDENTITY
    low_key, high_key = STAT_KEYS[mode]
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
    return FeatureStats(mode, low, high, convention)  # type: ignore[arg-type]


def normalizer_from_mapping(data: Mapping[str, Any], source: str) -> Normalizer:
    """Build from a preset's ``normalization`` mapping.

    ``{mode, convention, state: {...}, action: {...}}``; ``mode`` (default
    ``mean_std``) may also be given per feature inside ``state`` / ``action``;
    ``convention`` (``transformers`` by default, ``lerobot`` or ``openpi``) says whose
    epsilon and formulas apply, for statistics copied from such a checkpoint.

    Raises:
        CheckpointError: On an unknown mode, convention or key, or missing, mismatched
            or non-finite stats.
    """
    unknown = sorted(set(data) - {"mode", "convention", "state", "action"})
    if unknown:
        raise CheckpointError(source, f"normalization: unknown keys {unknown}")
    name = str(data.get("convention", TRANSFORMERS.name))
    if name not in CONVENTIONS:
        raise CheckpointError(source, f"normalization.convention {name!r} is not one of "
                                      f"{sorted(CONVENTIONS)}")
    default = str(data.get("mode", "mean_std"))
    features = {}
    for feature in ("state", "action"):
        stats = data.get(feature)
        mode = str(stats.get("mode", default)) if isinstance(stats, Mapping) else default
        features[feature] = feature_stats(mode, stats, source, feature, CONVENTIONS[name])
    return Normalizer(features["state"], features["action"], source)


def openpi_stats_file(directory: Path) -> Path | None:
    """Openpi's ``norm_stats.json`` at the top of ``directory`` or in one asset folder.

    Raises:
        CheckpointError: When several asset folders hold one.
    """
    direct = directory / OPENPI_STATS
    if direct.is_file():
        return direct
    found = sorted(directory.glob(f"assets/*/{OPENPI_STATS}"))
    if len(found) > 1:
        raise CheckpointError(directory, f"several {OPENPI_STATS} files "
                                         f"({[str(p.relative_to(directory)) for p in found]}); "
                                         "keep the one the robot was trained with")
    return found[0] if found else None


def _read_json(path: Path) -> object:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise CheckpointError(path, f"unreadable: {exc}") from exc


def _from_openpi(path: Path, mode: str) -> Normalizer:
    if mode not in ("mean_std", "quantiles", "identity"):
        raise CheckpointError(path, f"mode {mode!r}: openpi normalises with mean_std or "
                                    "quantiles only")
    data = _read_json(path)
    stats = data.get("norm_stats") if isinstance(data, Mapping) else None
    if not isinstance(stats, Mapping) or "state" not in stats or "actions" not in stats:
        raise CheckpointError(path, "norm_stats needs 'state' and 'actions' entries")
    where = str(path)
    return Normalizer(feature_stats(mode, stats["state"], where, "state", OPENPI),
                      feature_stats(mode, stats["actions"], where, "actions", OPENPI), where)


def _from_transformers(path: Path) -> Normalizer | None:
    data = _read_json(path)
    if not isinstance(data, Mapping):
        raise CheckpointError(path, "does not hold a JSON object")
    if data.get("processor_class") != "PI0Processor":
        raise CheckpointError(path, f"processor_class {data.get('processor_class')!r} is not "
                                    "PI0Processor")
    features = {}
    for ours, theirs in (("state", "state"), ("action", "actions")):
        mean, std = data.get(f"{theirs}_mean"), data.get(f"{theirs}_std")
        if (mean is None) != (std is None):
            raise CheckpointError(path, f"{theirs}_mean and {theirs}_std come together")
        features[ours] = None if mean is None else feature_stats(
            "mean_std", {"mean": mean, "std": std}, str(path), f"{theirs}_mean/std",
            TRANSFORMERS)
    if features["state"] is None and features["action"] is None:
        return None
    if features["state"] is None or features["action"] is None:
        raise CheckpointError(path, "holds state or action statistics but not both")
    return Normalizer(features["state"], features["action"], str(path))


def find_checkpoint_stats(directory: str | Path, mode: str = "mean_std") -> Normalizer | None:
    """Statistics a non-lerobot checkpoint directory ships, or ``None`` when it has none.

    transformers' ``processor_config.json`` (when it holds statistics), else an openpi
    ``norm_stats.json`` (normalised with ``mode``). lerobot's pipeline files are read
    by :mod:`.lerobot_pipeline`. Both present is refused: nothing says which one the
    checkpoint was trained with.

    Raises:
        CheckpointError: When a statistics file is present but unusable, or both are.
    """
    root = Path(directory)
    processor = root / TRANSFORMERS_PROCESSOR
    found = _from_transformers(processor) if processor.is_file() else None
    openpi = openpi_stats_file(root)
    if found is not None and openpi is not None:
        raise CheckpointError(root, f"both {TRANSFORMERS_PROCESSOR} and {openpi.name} hold "
                                    "statistics; keep the one the robot was trained with")
    if found is not None:
        return found
    return _from_openpi(openpi, mode) if openpi is not None else None
