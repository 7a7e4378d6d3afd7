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

A lerobot directory's saved pipelines (``policy_preprocessor.json``,
``policy_postprocessor.json``) are read by :mod:`.lerobot_pipeline`: their statistics,
relative actions, prompt settings and tokenizer are what the server runs.

Everything is checked at start-up (:func:`resolve_pi0`), so a missing file fails with
one :class:`~xinfer_ros.model.errors.CheckpointError` naming the path, never on the
first request. A file of the directory the server does not use is listed
(:attr:`Pi0Spec.unused_files`, logged at start-up and in ``xinfer-check-checkpoint``),
never read half-way. This module imports transformers (for ``PI0Config``) but not the
weights.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from xinfer_ros.model.errors import CheckpointError
from xinfer_ros.model.images import RESAMPLE_MODES
from xinfer_ros.model.io import CameraIO, ModelIO
from xinfer_ros.model.pi0 import FAMILY
from xinfer_ros.model.pi0.lerobot_pipeline import (
    LerobotPipeline,
    PipelineStep,
    read_lerobot_pipeline,
)
from xinfer_ros.model.pi0.normalization import (
    IDENTITY,
    OPENPI_STATS,
    TRANSFORMERS_PROCESSOR,
    Normalizer,
    find_checkpoint_stats,
    normalizer_from_mapping,
)
from xinfer_ros.model.pi0.relative import RelativeActions
from xinfer_ros.model.pi0.tokenizer import TOKENIZER_FILES
from xinfer_ros.rtc.masks import DEFAULT_BETA

if TYPE_CHECKING:
    from transformers import PI0Config

__all__ = [
    "CONFIG_FILE",
    "FAMILY",
    "LAYOUTS",
    "PROMPT_TOKENS",
    "WEIGHT_FILES",
    "Pi0Preset",
    "Pi0Spec",
    "default_resample",
    "resolve_pi0",
]

CONFIG_FILE = "config.json"
#: Files of which one must hold the weights (single file or sharded index).
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json")
#: Prompt tokens (BOS, instruction, newline, padding): lerobot's and openpi's 48.
PROMPT_TOKENS = 48
#: What a resolved spec's weights come from: a checkpoint of transformers' or lerobot's
#: layout (by its ``config.json`` and pipeline files), or seeded random weights.
LAYOUTS: tuple[str, ...] = ("transformers", "lerobot", "random")
#: Files a tokenizer directory may hold besides :data:`TOKENIZER_FILES`.
_TOKENIZER_EXTRA = ("tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
                    "chat_template.jinja")
_LOG = logging.getLogger("xinfer_ros.model.pi0")
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
        layout: One of :data:`LAYOUTS`.
        newline: How the instruction gets its newline (``tokenizer.NEWLINE_RULES``).
        relative: The joint mask of a relative-action policy (lerobot), else ``None``.
        steps: A lerobot checkpoint's pipeline steps and what runs for each.
        unused_files: Entries of the checkpoint directory the server does not use.
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
    layout: str = "random"
    newline: str = "always"
    relative: RelativeActions | None = None
    steps: tuple[PipelineStep, ...] = ()
    unused_files: tuple[str, ...] = ()
    resample: str = "area"

    def io(self) -> ModelIO:
        """What the model takes and returns (cameras at the model's square input)."""
        side = self.image_size
        return ModelIO(
            name=self.name, family=FAMILY,
            cameras=tuple(CameraIO(name, side, side) for name in self.cameras),
            state_dim=self.state_dim, action_dim=self.action_dim, horizon=self.chunk_size,
            num_steps=self.num_steps, masks_missing_cameras=True, resizes_images=True)


def _resample_key(value: object) -> str | None:
    if value is None:
        return None
    if value not in RESAMPLE_MODES:
        raise ValueError(f"image_resample must be one of {list(RESAMPLE_MODES)}, got {value!r}")
    return str(value)


def default_resample(layout: str, stats_source: str) -> str:
    """The image resampling a checkpoint was trained with, from what its directory holds.

    Args:
        layout: The checkpoint's layout (:data:`LAYOUTS`).
        stats_source: Where its statistics came from (``Normalizer.source``).

    openpi's statistics (``norm_stats.json``): openpi's PIL bilinear. A lerobot
    checkpoint: lerobot's bilinear without antialiasing. transformers' own: its
    ``PI0ImageProcessor``'s antialiased bicubic. Random weights were trained on
    nothing: the area filter.
    """
    if layout == "random":
        return "area"
    if stats_source.endswith(OPENPI_STATS):
        return "pil_bilinear"
    return "bilinear_noaa" if layout == "lerobot" else "pil_bicubic"


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
    relative: bool | None = None
    lerobot: bool = False


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
    # lerobot's validate_features adds its empty cameras to input_features before the
    # config is saved; an older config may not list them. Each counts once.
    empty = tuple(f"empty_camera_{i}" for i in range(int(data.get("empty_cameras", 0))))
    cameras += tuple(name for name in empty if name not in cameras)

    def _dim(features: Mapping[str, Any], key: str) -> int | None:
        shape = (features.get(key) or {}).get("shape")
        return int(shape[0]) if shape else None

    relative = data.get("use_relative_actions")
    if relative is not None and not isinstance(relative, bool):
        raise CheckpointError(path, f"use_relative_actions: expected true or false, got "
                                    f"{relative!r}")
    meta = _RobotMeta(cameras=cameras or None, state_dim=_dim(inputs, "observation.state"),
                      action_dim=_dim(outputs, "action"),
                      prompt_tokens=data.get("tokenizer_max_length"), relative=relative,
                      lerobot=True)
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


def _normalizer(preset: Pi0Preset, directory: Path | None, strict: bool,
                pipeline: LerobotPipeline | None) -> Normalizer:
    chosen = preset.normalization or {}
    found = pipeline.normalizer if pipeline is not None else None
    if found is None and directory is not None:
        found = find_checkpoint_stats(directory, str(chosen.get("mode", "mean_std")))
    if found is not None:
        if chosen.get("state") is not None or chosen.get("action") is not None:
            _LOG.warning("preset %s: its normalization statistics are not used; the "
                         "checkpoint ships its own (%s)", preset.name, found.source)
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
                                     "policy_preprocessor.json, openpi's norm_stats.json or "
                                     "transformers' processor_config.json, or statistics "
                                     "(or mode: identity) in the preset")


def _weight_files(directory: Path) -> set[str]:
    index = directory / "model.safetensors.index.json"
    if not index.is_file():
        return {"model.safetensors"}
    weight_map = _read_json(index).get("weight_map", {})
    return {index.name, *(str(v) for v in weight_map.values())}


def _unused_files(directory: Path, spec: Pi0Spec,
                  pipeline: LerobotPipeline | None) -> tuple[str, ...]:
    """Top-level entries of ``directory`` nothing of ``spec`` comes from."""
    used = {CONFIG_FILE} | _weight_files(directory)
    if spec.tokenizer_path is not None and Path(spec.tokenizer_path) == directory:
        used |= {*TOKENIZER_FILES, *_TOKENIZER_EXTRA}
    if pipeline is not None:
        used |= set(pipeline.files)
    source = Path(spec.normalizer.source)
    if source.parent == directory:
        used.add(source.name)
    elif source.name == OPENPI_STATS and directory / "assets" in source.parents:
        used.add("assets")
    return tuple(sorted(p.name for p in directory.iterdir() if p.name not in used))


def _check_processor_config(spec: Pi0Spec) -> None:
    """The widths of transformers' saved processor (it pads and reshapes) must be the model's."""
    path = Path(spec.normalizer.source)
    if path.name != TRANSFORMERS_PROCESSOR:
        return
    data = _read_json(path)
    for key, ours in (("max_state_dim", spec.max_state_dim), ("chunk_size", spec.chunk_size)):
        if key in data and data[key] != ours:
            raise CheckpointError(path, f"{key}: {data[key]} but the model's config says {ours}")


def _layout(directory: Path | None, meta: _RobotMeta, pipeline: LerobotPipeline | None) -> str:
    if directory is None:
        return "random"
    return "lerobot" if pipeline is not None or meta.lerobot else "transformers"


def _newline(meta: _RobotMeta, pipeline: LerobotPipeline | None) -> str:
    if pipeline is not None:
        return pipeline.newline
    # lerobot's π0 appends the newline only when missing, pipeline files or not;
    # transformers' PI0Processor always does.
    return "if_missing" if meta.lerobot else "always"


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
    state_dim = meta.state_dim or preset.state_dim
    action_dim = meta.action_dim or preset.action_dim
    pipeline = None
    prompt_tokens = int(meta.prompt_tokens or preset.prompt_tokens)
    if directory is not None:
        pipeline = read_lerobot_pipeline(directory, action_dim=action_dim, state_dim=state_dim,
                                         config_relative=meta.relative)
    if directory is not None and pipeline is not None:
        if meta.prompt_tokens is not None and meta.prompt_tokens != pipeline.prompt_tokens:
            raise CheckpointError(directory / CONFIG_FILE,
                                  f"tokenizer_max_length {meta.prompt_tokens} differs from the "
                                  f"tokenizer step's max_length {pipeline.prompt_tokens}")
        prompt_tokens = pipeline.prompt_tokens
    tokenizer = preset.tokenizer_path
    if tokenizer is None and pipeline is not None and pipeline.tokenizer_dir is not None:
        tokenizer = str(pipeline.tokenizer_dir)
    if tokenizer is None and directory is not None:
        tokenizer = str(directory)
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
        state_dim=state_dim,
        action_dim=action_dim,
        prompt_tokens=prompt_tokens,
        image_token_id=int(vlm.image_token_id),
        vocab_size=int(vlm.text_config.vocab_size),
        normalizer=_normalizer(preset, directory, strict, pipeline),
        beta=preset.beta,
        dtype=preset.dtype,
        seed=preset.seed,
        layout=_layout(directory, meta, pipeline),
        newline=_newline(meta, pipeline),
        relative=pipeline.relative if pipeline is not None else None,
        steps=pipeline.steps if pipeline is not None else (),
    )
    spec = dataclasses.replace(spec, resample=preset.image_resample
                               or default_resample(spec.layout, spec.normalizer.source))
    _check_robot(spec, str(directory) if directory is not None else f"preset {preset.name}")
    _check_processor_config(spec)
    if directory is not None:
        spec = dataclasses.replace(spec, unused_files=_unused_files(directory, spec, pipeline))
        if spec.unused_files:
            _LOG.warning("%s: not used by this server: %s", directory,
                         ", ".join(spec.unused_files))
    return config, spec
