"""π0 presets and checkpoint directories, resolved into one serving spec.

A π0 preset (``config/models/pi0.yaml``, ``pi0-tiny.yaml`` or a file of your own,
``family: pi0``) names the transformers ``PI0Config`` to build, the robot the model
serves (camera names, state and action dimensions), the prompt length, the RTC
guidance clip and, optionally, a checkpoint directory (``model_path``), a tokenizer
directory (``tokenizer_path``) and normalisation statistics.

A checkpoint directory is read in either layout ``PI0ForConditionalGeneration.
from_pretrained`` loads:

* transformers' own (``save_pretrained``: ``config.json`` with ``model_type: pi0``);
* lerobot's π0 (``model.safetensors`` under lerobot's key names, which transformers'
  conversion mapping renames on load). Its ``config.json`` may be transformers' or
  lerobot's own (``type: pi0``); lerobot's is translated here, and its features name
  the robot's cameras and dimensions.

Everything is checked at start-up (:func:`resolve_pi0`), so a missing file fails with
one :class:`~xinfer_ros.model.errors.CheckpointError` naming the path, never on the
first request. This module imports transformers (for ``PI0Config``) but not the
weights.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from xinfer_ros.model.errors import CheckpointError
from xinfer_ros.model.images import RESAMPLE_MODES
from xinfer_ros.model.pi0.normalization import (
    IDENTITY,
    OPENPI_STATS,
    Normalizer,
    find_checkpoint_stats,
    normalizer_from_mapping,
)
from xinfer_ros.model.presets import CameraIO, ModelIO
from xinfer_ros.rtc.masks import DEFAULT_BETA

if TYPE_CHECKING:
    from transformers import PI0Config

__all__ = [
    "CONFIG_FILE",
    "FAMILY",
    "PROMPT_TOKENS",
    "WEIGHT_FILES",
    "Pi0Preset",
    "Pi0Spec",
    "default_resample",
    "resolve_pi0",
]

#: The ``family`` key of a π0 preset.
FAMILY = "pi0"
CONFIG_FILE = "config.json"
#: Files of which one must hold the weights (single file or sharded index).
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json")
#: Prompt tokens (BOS, instruction, newline, padding): lerobot's and openpi's 48.
PROMPT_TOKENS = 48
#: lerobot's model variants that match ``PI0Config()``'s defaults.
_LEROBOT_VARIANTS = {"paligemma_variant": "gemma_2b", "action_expert_variant": "gemma_300m"}
#: lerobot ``PI0Config`` fields that are ``PI0Config`` fields of the same name.
_LEROBOT_SHARED = ("chunk_size", "max_state_dim", "max_action_dim", "num_inference_steps",
                   "min_period", "max_period", "time_sampling_beta_alpha",
                   "time_sampling_beta_beta", "time_sampling_scale", "time_sampling_offset")


@dataclasses.dataclass(frozen=True)
class Pi0Preset:
    """A π0 preset file.

    Attributes:
        name: Preset name.
        transformers_config: Keyword arguments of ``transformers.PI0Config`` for random
            weights (empty: its defaults, the real π0 shapes).
        cameras: The robot's camera names in request order (at most the model's).
        state_dim: The robot's state dimension (zero-padded to ``max_state_dim``).
        action_dim: The robot's action dimension (sliced from ``max_action_dim``).
        model_path: Checkpoint directory; ``None`` serves seeded random weights.
        tokenizer_path: Tokenizer directory (default: ``model_path``).
        normalization: ``{mode, state, action}`` statistics, or ``None``.
        prompt_tokens: Prompt length in tokens, padded (longer prompts are refused).
        beta: RTC guidance weight clip.
        dtype: Parameter dtype name.
        seed: Seed of the random weights.
        image_resample: Image resampling (:data:`~xinfer_ros.model.images.
            RESAMPLE_MODES`); ``None``: the checkpoint's training convention
            (:func:`default_resample`).
    """

    name: str
    transformers_config: Mapping[str, Any]
    cameras: tuple[str, ...]
    state_dim: int
    action_dim: int
    model_path: str | None = None
    tokenizer_path: str | None = None
    normalization: Mapping[str, Any] | None = None
    prompt_tokens: int = PROMPT_TOKENS
    beta: float = DEFAULT_BETA
    dtype: str = "float32"
    seed: int = 0
    image_resample: str | None = None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Pi0Preset:
        """Build from a preset file's mapping.

        Raises:
            ValueError: On unknown or missing keys.
        """
        known = {f.name for f in dataclasses.fields(cls)} | {"family", "robot"}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"unknown π0 preset keys: {sorted(unknown)}")
        robot = data.get("robot") or {}
        try:
            return cls(
                name=str(data["name"]),
                transformers_config=dict(data.get("transformers_config") or {}),
                cameras=tuple(str(c) for c in robot["cameras"]),
                state_dim=int(robot["state_dim"]),
                action_dim=int(robot["action_dim"]),
                model_path=data.get("model_path") or None,
                tokenizer_path=data.get("tokenizer_path") or None,
                normalization=data.get("normalization"),
                prompt_tokens=int(data.get("prompt_tokens", PROMPT_TOKENS)),
                beta=float(data.get("beta", DEFAULT_BETA)),
                dtype=str(data.get("dtype", "float32")),
                seed=int(data.get("seed", 0)),
                image_resample=_resample_key(data.get("image_resample")),
            )
        except (KeyError, TypeError) as exc:
            raise ValueError(f"π0 preset {data.get('name')!r}: missing or malformed "
                             f"{exc}") from exc


@dataclasses.dataclass(frozen=True)
class Pi0Spec:
    """What a resolved π0 model takes and returns.

    Attributes:
        name: Preset name.
        model_path: Checkpoint directory, or ``None`` for random weights.
        tokenizer_path: Tokenizer directory, or ``None`` for the offline tokenizer.
        cameras: Camera names in request order.
        image_size: Square model input side in pixels.
        tokens_per_image: Visual tokens per camera.
        chunk_size: Keyframes per chunk H.
        num_steps: Denoising steps K.
        max_state_dim: Padded state width.
        max_action_dim: Padded action width.
        state_dim: The robot's state dimension.
        action_dim: The robot's action dimension.
        prompt_tokens: Prompt length in tokens.
        image_token_id: Placeholder id of a visual token in ``input_ids``.
        vocab_size: Rows of the language model's embedding.
        normalizer: State and action statistics.
        beta: RTC guidance clip.
        dtype: Parameter dtype name.
        seed: Seed of random weights and of nothing else.
        resample: Image resampling of the checkpoint's training pipeline.
    """

    name: str
    model_path: str | None
    tokenizer_path: str | None
    cameras: tuple[str, ...]
    image_size: int
    tokens_per_image: int
    chunk_size: int
    num_steps: int
    max_state_dim: int
    max_action_dim: int
    state_dim: int
    action_dim: int
    prompt_tokens: int
    image_token_id: int
    vocab_size: int
    normalizer: Normalizer
    beta: float
    dtype: str
    seed: int
    resample: str = "area"

    def io(self) -> ModelIO:
        """What the model takes and returns (cameras at the model's square input)."""
        side = self.image_size
        return ModelIO(
            name=self.name, family=FAMILY,
            cameras=tuple(CameraIO(name, side, side) for name in self.cameras),
            state_dim=self.state_dim, action_dim=self.action_dim, horizon=self.chunk_size,
            num_steps=self.num_steps, masks_missing_cameras=True, resizes_images=True)


def _resample_key(value: Any) -> str | None:
    if value is None:
        return None
    if value not in RESAMPLE_MODES:
        raise ValueError(f"image_resample must be one of {list(RESAMPLE_MODES)}, got {value!r}")
    return str(value)


def default_resample(directory: Path | None, stats_source: str) -> str:
    """The image resampling a checkpoint was trained with, from what its directory holds.

    openpi's statistics (``norm_stats.json``): openpi's PIL bilinear. A lerobot
    ``config.json``: lerobot's bilinear without antialiasing. transformers' own
    ``config.json``: its ``PI0ImageProcessor``'s antialiased bicubic. Random weights
    (no directory) were trained on nothing: the area filter.
    """
    if directory is None:
        return "area"
    if stats_source.endswith(OPENPI_STATS):
        return "pil_bilinear"
    config = directory / CONFIG_FILE
    try:
        lerobot = json.loads(config.read_text(encoding="utf-8")).get("type") == FAMILY
    except (OSError, ValueError, AttributeError):
        lerobot = False
    return "bilinear_noaa" if lerobot else "pil_bicubic"


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise CheckpointError(path, f"unreadable: {exc}") from exc
    if not isinstance(data, dict):
        raise CheckpointError(path, "does not hold a JSON object")
    return data


@dataclasses.dataclass(frozen=True)
class _RobotMeta:
    """What a lerobot config says about the robot (``None``: not said)."""

    cameras: tuple[str, ...] | None = None
    state_dim: int | None = None
    action_dim: int | None = None
    prompt_tokens: int | None = None


def _lerobot_config(data: Mapping[str, Any], path: Path) -> tuple[PI0Config, _RobotMeta]:
    """Translate lerobot's ``PI0Config`` JSON into transformers' config and robot facts."""
    from transformers import PI0Config

    for key, wanted in _LEROBOT_VARIANTS.items():
        if data.get(key, wanted) != wanted:
            raise CheckpointError(path, f"{key}={data[key]!r} is not supported (only "
                                        f"{wanted}, the π0 shapes); write a transformers "
                                        "config.json for other shapes")
    resolution = tuple(data.get("image_resolution", (224, 224)))
    if resolution != (224, 224):
        raise CheckpointError(path, f"image_resolution {list(resolution)} is not supported "
                                    "(π0's SigLIP takes 224x224)")
    config = PI0Config(**{k: data[k] for k in _LEROBOT_SHARED if k in data})
    inputs = data.get("input_features") or {}
    outputs = data.get("output_features") or {}
    cameras = tuple(k.rsplit(".", 1)[-1] for k, f in inputs.items()
                    if isinstance(f, Mapping) and f.get("type") == "VISUAL")
    cameras += tuple(f"empty_camera_{i}" for i in range(int(data.get("empty_cameras", 0))))

    def _dim(features: Mapping[str, Any], key: str) -> int | None:
        shape = (features.get(key) or {}).get("shape")
        return int(shape[0]) if shape else None

    meta = _RobotMeta(cameras=cameras or None, state_dim=_dim(inputs, "observation.state"),
                      action_dim=_dim(outputs, "action"),
                      prompt_tokens=data.get("tokenizer_max_length"))
    return config, meta


def _checkpoint_config(directory: Path) -> tuple[PI0Config, _RobotMeta]:
    if not directory.is_dir():
        raise CheckpointError(directory, "model_path is not a directory")
    config_path = directory / CONFIG_FILE
    if not config_path.is_file():
        raise CheckpointError(directory, f"no {CONFIG_FILE}: not a π0 checkpoint directory")
    if not any((directory / name).is_file() for name in WEIGHT_FILES):
        raise CheckpointError(directory, f"no weights: expected one of {list(WEIGHT_FILES)}")
    data = _read_json(config_path)
    if data.get("model_type") == FAMILY:
        from transformers import PI0Config

        try:
            return PI0Config.from_dict(data), _RobotMeta()
        except (TypeError, ValueError) as exc:
            raise CheckpointError(config_path, f"invalid PI0Config: {exc}") from exc
    if data.get("type") == FAMILY:
        return _lerobot_config(data, config_path)
    kind = data.get("model_type", data.get("type"))
    raise CheckpointError(config_path, f"not a PI0 config (model_type {kind!r}; need 'pi0')")


def _normalizer(preset: Pi0Preset, directory: Path | None, strict: bool) -> Normalizer:
    chosen = preset.normalization or {}
    if directory is not None:
        found = find_checkpoint_stats(directory, str(chosen.get("mode", "mean_std")))
        if found is not None:
            return found
    if chosen.get("state") is not None or chosen.get("action") is not None \
            or chosen.get("mode") == "identity":
        return normalizer_from_mapping(chosen, f"preset {preset.name}")
    if directory is None:
        # Random weights were trained on no data set: no statistics can be faithful.
        return Normalizer(IDENTITY, IDENTITY, "identity (random weights)")
    if not strict:
        return Normalizer(IDENTITY, IDENTITY, "identity (model units only)")
    raise CheckpointError(directory, "no normalisation statistics: expected lerobot's "
                                     "policy_preprocessor.json or openpi's norm_stats.json, "
                                     "or statistics (or mode: identity) in the preset")


def _check_robot(spec: Pi0Spec, where: str) -> None:
    if not spec.cameras:
        raise CheckpointError(where, "the robot has no camera")
    if not 1 <= spec.state_dim <= spec.max_state_dim:
        raise CheckpointError(where, f"state_dim {spec.state_dim} outside 1..max_state_dim "
                                     f"{spec.max_state_dim}")
    if not 1 <= spec.action_dim <= spec.max_action_dim:
        raise CheckpointError(where, f"action_dim {spec.action_dim} outside 1..max_action_dim "
                                     f"{spec.max_action_dim}")
    if spec.prompt_tokens < 2:
        raise CheckpointError(where, f"prompt_tokens {spec.prompt_tokens} leaves no room for "
                                     "an instruction")
    spec.normalizer.check_dims(spec.state_dim, spec.action_dim)


def resolve_pi0(preset: Pi0Preset, model_path: str | Path | None = None, *,
                strict: bool = True) -> tuple[PI0Config, Pi0Spec]:
    """Check a preset (and its checkpoint directory) and return what serving needs.

    Args:
        preset: The preset.
        model_path: Checkpoint directory overriding the preset's (``None``: the
            preset's; neither: random weights).
        strict: Require normalisation statistics for a checkpoint. ``False`` serves
            checks in model units only (parity), where statistics play no part.

    Returns:
        The transformers config and the serving spec.

    Raises:
        CheckpointError: Naming the directory or file and what is wrong with it.
    """
    from transformers import PI0Config

    path = model_path if model_path not in (None, "") else preset.model_path
    directory = Path(path).expanduser() if path else None
    meta = _RobotMeta()
    if directory is not None:
        config, meta = _checkpoint_config(directory)
    else:
        try:
            config = PI0Config(**preset.transformers_config)
        except (TypeError, ValueError) as exc:
            raise CheckpointError(f"preset {preset.name}", f"invalid PI0Config: {exc}") from exc
    # PI0Config's __post_init__ turns the sub-config dicts into configs.
    vlm: Any = config.vlm_config
    vision = vlm.vision_config
    tokenizer = preset.tokenizer_path or (str(directory) if directory is not None else None)
    spec = Pi0Spec(
        name=preset.name,
        model_path=str(directory) if directory is not None else None,
        tokenizer_path=tokenizer,
        cameras=meta.cameras or preset.cameras,
        image_size=int(vision.image_size),
        tokens_per_image=(int(vision.image_size) // int(vision.patch_size)) ** 2,
        chunk_size=int(config.chunk_size),
        num_steps=int(config.num_inference_steps),
        max_state_dim=int(config.max_state_dim),
        max_action_dim=int(config.max_action_dim),
        state_dim=meta.state_dim or preset.state_dim,
        action_dim=meta.action_dim or preset.action_dim,
        prompt_tokens=int(meta.prompt_tokens or preset.prompt_tokens),
        image_token_id=int(vlm.image_token_id),
        vocab_size=int(vlm.text_config.vocab_size),
        normalizer=_normalizer(preset, directory, strict),
        beta=preset.beta,
        dtype=preset.dtype,
        seed=preset.seed,
    )
    spec = dataclasses.replace(spec, resample=preset.image_resample
                               or default_resample(directory, spec.normalizer.source))
    _check_robot(spec, str(directory) if directory is not None else f"preset {preset.name}")
    return config, spec
