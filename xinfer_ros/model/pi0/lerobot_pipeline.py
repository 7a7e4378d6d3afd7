"""lerobot's saved processor pipelines of a π0 checkpoint: read, checked, executed.

A lerobot checkpoint directory holds ``policy_preprocessor.json`` and
``policy_postprocessor.json`` (``DataProcessorPipeline.save_pretrained``): a list of
steps, each ``{"registry_name": ..., "config": {...}}`` with a ``state_file``
(safetensors) for stateful steps and ``artifacts`` (files it saved, such as the
tokenizer) for some. lerobot's π0 writes (``make_pi0_pre_post_processors``)::

    pre:  rename_observations_processor, to_batch_processor, pi0_new_line_processor,
          tokenizer_processor, device_processor, relative_actions_processor,
          normalizer_processor
    post: unnormalizer_processor, absolute_actions_processor, device_processor

Every step the server knows is executed by the request path (normalisation, relative
actions, the prompt's newline and tokenizer settings) or is a no-op here (renaming
dataset keys, batching, device moves); any other step, setting or mode stops start-up
with one :class:`~xinfer_ros.model.errors.CheckpointError` naming the file and the
field. NumPy and safetensors only.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np

from xinfer_ros.model.errors import CheckpointError
from xinfer_ros.model.pi0.normalization import (
    IDENTITY,
    LEROBOT,
    FeatureStats,
    Normalizer,
    NormConvention,
    feature_stats,
)
from xinfer_ros.model.pi0.relative import RelativeActions, relative_mask

__all__ = [
    "LEROBOT_MODES",
    "POSTPROCESSOR",
    "PREPROCESSOR",
    "LerobotPipeline",
    "PipelineStep",
    "read_lerobot_pipeline",
]

PREPROCESSOR = "policy_preprocessor.json"
POSTPROCESSOR = "policy_postprocessor.json"
#: lerobot's ``NormalizationMode`` values -> ours.
LEROBOT_MODES = {"MEAN_STD": "mean_std", "MIN_MAX": "min_max", "QUANTILES": "quantiles",
                 "QUANTILE10": "quantile10", "IDENTITY": "identity"}
_STATE, _ACTION = "observation.state", "action"
#: An object of a pipeline file as parsed (each value's type is checked where it is read).
_JsonObject = Mapping[str, object]
#: Keys a step entry may have (``class``: an unregistered step, never known here).
_ENTRY_KEYS = {"registry_name", "class", "config", "state_file", "artifacts"}


@dataclasses.dataclass(frozen=True)
class PipelineStep:
    """One step of a saved pipeline and what the server does for it.

    Attributes:
        file: The pipeline file's name.
        index: Position in its ``steps`` list.
        name: The step's registry name.
        runs: What runs for it here, in words.
    """

    file: str
    index: int
    name: str
    runs: str


@dataclasses.dataclass(frozen=True)
class LerobotPipeline:
    """What a lerobot checkpoint's pipelines make the server do.

    Attributes:
        steps: Every step of both files, in order.
        normalizer: State statistics of the normaliser, action statistics of the
            unnormaliser (checked equal to the normaliser's).
        relative: The joint mask when the policy predicts relative actions.
        newline: ``if_missing`` when ``pi0_new_line_processor`` runs, else ``never``.
        prompt_tokens: The tokenizer step's ``max_length``.
        tokenizer_dir: The tokenizer the pipeline saved beside it (``None``: it names
            one on the Hub, which must be supplied).
        tokenizer_name: The tokenizer the pipeline names.
        files: Files and folders of the directory the pipelines use.
    """

    steps: tuple[PipelineStep, ...]
    normalizer: Normalizer
    relative: RelativeActions | None
    newline: str
    prompt_tokens: int
    tokenizer_dir: Path | None
    tokenizer_name: str
    files: tuple[str, ...]


class _File:
    """One pipeline file being read: its steps, with errors naming the file and field."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise CheckpointError(path, f"unreadable: {exc}") from exc
        steps = data.get("steps") if isinstance(data, Mapping) else None
        if not isinstance(steps, list):
            raise CheckpointError(path, "steps: expected a list of processor steps")
        self.steps: list[tuple[str, _JsonObject, _JsonObject]] = []
        for index, entry in enumerate(steps):
            if not isinstance(entry, Mapping):
                raise CheckpointError(path, f"steps[{index}]: expected an object")
            unknown = sorted(set(entry) - _ENTRY_KEYS)
            if unknown:
                raise CheckpointError(path, f"steps[{index}]: unknown keys {unknown}")
            name = entry.get("registry_name")
            if not isinstance(name, str):
                raise CheckpointError(path, f"steps[{index}]: unknown step "
                                            f"{entry.get('class')!r} (not a registered step; "
                                            "this server cannot run it)")
            config = entry.get("config", {})
            if not isinstance(config, Mapping):
                raise CheckpointError(path, f"steps[{index}].config: expected an object")
            self.steps.append((name, config, entry))

    def fail(self, index: int, field: str, message: str) -> CheckpointError:
        return CheckpointError(self.path, f"steps[{index}].{field}: {message}")

    def settings(self, index: int, config: _JsonObject, allowed: set[str]) -> None:
        unknown = sorted(set(config) - allowed)
        if unknown:
            raise self.fail(index, "config", f"unknown settings {unknown} of "
                                             f"{self.steps[index][0]}")


@dataclasses.dataclass
class _Found:
    """What the steps read so far say (filled step by step)."""

    steps: list[PipelineStep] = dataclasses.field(default_factory=list)
    state: FeatureStats | None = None
    pre_action: FeatureStats | None = None
    action: FeatureStats | None = None
    normalize_at: int | None = None
    unnormalize_at: int | None = None
    relative: _JsonObject | None = None
    relative_at: int | None = None
    absolute: bool | None = None
    absolute_at: int | None = None
    newline_at: int | None = None
    tokenizer: _JsonObject | None = None
    tokenizer_at: int | None = None
    max_length: int = 0
    tokenizer_dir: Path | None = None
    files: list[str] = dataclasses.field(default_factory=list)
    source: str = ""


def _stats_file(file: _File, index: int, entry: _JsonObject,
                 found: _Found) -> dict[str, dict[str, np.ndarray]]:
    name = entry.get("state_file")
    if name is None:
        return {}
    path = file.path.parent / str(name)
    if not path.is_file():
        raise file.fail(index, "state_file", f"{name!r} is missing")
    from safetensors import SafetensorError
    from safetensors.numpy import load_file

    try:
        flat = load_file(str(path))
    except (OSError, SafetensorError, ValueError) as exc:
        raise CheckpointError(path, f"unreadable statistics: {exc}") from exc
    found.files.append(str(name))
    grouped: dict[str, dict[str, np.ndarray]] = {}
    for key, value in flat.items():
        feature, _, stat = key.rpartition(".")
        grouped.setdefault(feature, {})[stat] = value
    return grouped


def _modes(file: _File, index: int, config: _JsonObject) -> dict[str, str]:
    norm_map = config.get("norm_map", {})
    if not isinstance(norm_map, Mapping):
        raise file.fail(index, "config.norm_map", "expected an object")
    modes = {}
    for kind, mode in norm_map.items():
        if mode not in LEROBOT_MODES:
            raise file.fail(index, f"config.norm_map.{kind}", f"unknown normalisation mode "
                                                              f"{mode!r}; known: "
                                                              f"{sorted(LEROBOT_MODES)}")
        modes[str(kind)] = LEROBOT_MODES[mode]
    if modes.get("VISUAL", "identity") != "identity":
        raise file.fail(index, "config.norm_map.VISUAL",
                        f"{norm_map['VISUAL']} is not supported (π0 scales images to [-1, 1] "
                        "itself; lerobot's π0 trains with IDENTITY)")
    return modes


def _convention(file: _File, index: int, config: _JsonObject) -> NormConvention:
    eps = config.get("eps", LEROBOT.eps)
    if isinstance(eps, bool) or not isinstance(eps, int | float) or not 0 <= eps < 1:
        raise file.fail(index, "config.eps", f"expected a small non-negative number, got "
                                             f"{eps!r}")
    return dataclasses.replace(LEROBOT, eps=float(eps))


def _feature_width(file: _File, index: int, config: _JsonObject, key: str) -> int | None:
    features = config.get("features", {})
    if not isinstance(features, Mapping):
        raise file.fail(index, "config.features", "expected an object")
    feature = features.get(key)
    if feature is None:
        return None
    shape = feature.get("shape") if isinstance(feature, Mapping) else None
    if not isinstance(shape, list | tuple) or len(shape) != 1:
        raise file.fail(index, f"config.features.{key}.shape", f"expected [width], got "
                                                               f"{shape!r}")
    return int(shape[0])


def _feature(file: _File, index: int, entry: _JsonObject, key: str, *, kind: str,
             grouped: Mapping[str, Mapping[str, np.ndarray]]) -> FeatureStats:
    config = entry.get("config", {})
    if not isinstance(config, Mapping):  # _File checked it
        raise file.fail(index, "config", "expected an object")
    mode = _modes(file, index, config).get(kind, "identity")
    keys = config.get("normalize_observation_keys")
    if keys is not None and not isinstance(keys, list):
        raise file.fail(index, "config.normalize_observation_keys",
                        f"expected a list of feature names, got {keys!r}")
    if key != _ACTION and keys is not None and key not in keys:
        mode = "identity"
    if mode == "identity":
        return IDENTITY
    stats_name = entry.get("state_file")
    where = str(file.path.parent / str(stats_name)) if stats_name else str(file.path)
    if key not in grouped:
        raise CheckpointError(where, f"{key}: {kind} is normalised with {mode} but the file "
                                     f"holds no {key} statistics")
    stats = feature_stats(mode, grouped[key], where, key, _convention(file, index, config))
    width = _feature_width(file, index, config, key)
    if width is not None and stats.dim != width:
        raise CheckpointError(where, f"{key}: statistics have {stats.dim} values but "
                                     f"config.features.{key} of {file.path.name} says {width}")
    return stats


def _normalizer(file: _File, index: int, config: _JsonObject, entry: _JsonObject,
                found: _Found) -> str:
    file.settings(index, config, {"eps", "features", "norm_map", "normalize_observation_keys"})
    grouped = _stats_file(file, index, entry, found)
    found.state = _feature(file, index, entry, _STATE, kind="STATE", grouped=grouped)
    found.pre_action = _feature(file, index, entry, _ACTION, kind="ACTION", grouped=grouped)
    found.normalize_at = index
    if entry.get("state_file"):
        found.source = str(file.path.parent / str(entry["state_file"]))
    return f"state: {found.state.mode} ({found.state.convention.name} eps " \
           f"{found.state.convention.eps:g})"


def _unnormalizer(file: _File, index: int, config: _JsonObject, entry: _JsonObject,
                  found: _Found) -> str:
    file.settings(index, config, {"eps", "features", "norm_map", "normalize_observation_keys"})
    grouped = _stats_file(file, index, entry, found)
    found.action = _feature(file, index, entry, _ACTION, kind="ACTION", grouped=grouped)
    found.unnormalize_at = index
    return f"actions: {found.action.mode} back to robot units"


def _relative(file: _File, index: int, config: _JsonObject, entry: _JsonObject,
              found: _Found) -> str:
    file.settings(index, config, {"enabled", "exclude_joints", "action_names"})
    if not isinstance(config.get("enabled", False), bool):
        raise file.fail(index, "config.enabled", "expected true or false")
    for key in ("exclude_joints", "action_names"):
        value = config.get(key)
        if value is not None and (not isinstance(value, list)
                                  or not all(isinstance(v, str) for v in value)):
            raise file.fail(index, f"config.{key}", "expected a list of names")
    found.relative, found.relative_at = config, index
    return "actions relative to the state on the joint mask" if config.get("enabled") \
        else "off (disabled)"


def _absolute(file: _File, index: int, config: _JsonObject, entry: _JsonObject,
              found: _Found) -> str:
    file.settings(index, config, {"enabled"})
    enabled = config.get("enabled", False)
    if not isinstance(enabled, bool):
        raise file.fail(index, "config.enabled", "expected true or false")
    found.absolute, found.absolute_at = enabled, index
    return "state added back on the joint mask" if enabled else "off (disabled)"


def _tokenizer(file: _File, index: int, config: _JsonObject, entry: _JsonObject,
               found: _Found) -> str:
    file.settings(index, config, {"max_length", "task_key", "padding_side", "padding",
                                  "truncation", "tokenizer_name"})
    length = config.get("max_length")
    if isinstance(length, bool) or not isinstance(length, int) or length < 2:
        raise file.fail(index, "config.max_length", f"expected a prompt length >= 2, got "
                                                    f"{length!r}")
    if config.get("padding_side", "right") != "right":
        raise file.fail(index, "config.padding_side", f"{config['padding_side']!r} is not "
                                                      "supported (this server pads right)")
    # Padding is masked out of attention and positions: max_length and longest agree.
    if config.get("padding", "max_length") not in ("max_length", "longest"):
        raise file.fail(index, "config.padding", f"{config['padding']!r} is not supported")
    if not isinstance(config.get("truncation", True), bool):
        raise file.fail(index, "config.truncation", "expected true or false")
    artifacts = entry.get("artifacts") or {}
    if not isinstance(artifacts, Mapping):
        raise file.fail(index, "artifacts", "expected an object")
    name = config.get("tokenizer_name")
    folder = artifacts.get("tokenizer_name", name)
    if isinstance(folder, str) and not Path(folder).is_absolute() and ".." not in folder \
            and (file.path.parent / folder).is_dir():
        found.tokenizer_dir = file.path.parent / folder
        found.files.append(folder)
    elif artifacts:
        raise file.fail(index, "artifacts.tokenizer_name", f"the saved tokenizer {folder!r} "
                                                           "is missing")
    found.tokenizer, found.tokenizer_at, found.max_length = config, index, length
    return f"prompt of {length} tokens, padded right (longer instructions are refused, " \
           "not truncated)"


def _newline(file: _File, index: int, config: _JsonObject, entry: _JsonObject,
             found: _Found) -> str:
    file.settings(index, config, set())
    found.newline_at = index
    return "newline appended to the instruction unless it ends with one"


def _rename(file: _File, index: int, config: _JsonObject, entry: _JsonObject,
            found: _Found) -> str:
    file.settings(index, config, {"rename_map"})
    rename = config.get("rename_map", {})
    if not isinstance(rename, Mapping):
        raise file.fail(index, "config.rename_map", "expected an object")
    if not rename:
        return "no-op (empty rename map)"
    pairs = ", ".join(f"{k} -> {v}" for k, v in rename.items())
    return f"no-op: requests name cameras by position in the model's order ({pairs})"


def _device(file: _File, index: int, config: _JsonObject, entry: _JsonObject,
            found: _Found) -> str:
    file.settings(index, config, {"device", "float_dtype"})
    dtype = config.get("float_dtype")
    if dtype not in (None, "float32"):
        raise file.fail(index, "config.float_dtype", f"{dtype!r} is not supported (the state "
                                                     "and actions stay float32 here)")
    return "no-op (the server places tensors itself)"


def _batch(file: _File, index: int, config: _JsonObject, entry: _JsonObject,
           found: _Found) -> str:
    file.settings(index, config, set())
    return "no-op (the server batches itself)"


_Handler = Callable[[_File, int, _JsonObject, _JsonObject, _Found], str]
_PRE: dict[str, _Handler] = {
    "rename_observations_processor": _rename, "to_batch_processor": _batch,
    "pi0_new_line_processor": _newline, "tokenizer_processor": _tokenizer,
    "device_processor": _device, "relative_actions_processor": _relative,
    "normalizer_processor": _normalizer}
_POST: dict[str, _Handler] = {
    "unnormalizer_processor": _unnormalizer, "absolute_actions_processor": _absolute,
    "device_processor": _device}


def _run(file: _File, handlers: Mapping[str, _Handler], found: _Found) -> None:
    seen: set[str] = set()
    for index, (name, config, entry) in enumerate(file.steps):
        handler = handlers.get(name)
        if handler is None:
            raise CheckpointError(file.path, f"steps[{index}]: unknown step {name!r}; this "
                                             f"server runs {sorted(handlers)} in this file")
        if name in seen and name != "device_processor":
            raise file.fail(index, "registry_name", f"{name} appears twice")
        seen.add(name)
        found.steps.append(PipelineStep(file.path.name, index, name,
                                        handler(file, index, config, entry, found)))


def _check_order(pre: _File, found: _Found) -> None:
    if found.tokenizer_at is None:
        raise CheckpointError(pre.path, "steps: no tokenizer_processor step (π0 needs its "
                                        "prompt settings)")
    if found.normalize_at is None or found.state is None or found.pre_action is None:
        raise CheckpointError(pre.path, "steps: no normalizer_processor step")
    if found.newline_at is not None and found.newline_at > found.tokenizer_at:
        raise pre.fail(found.newline_at, "registry_name", "pi0_new_line_processor after the "
                                                          "tokenizer is not supported")
    if found.relative_at is not None and found.relative_at > found.normalize_at:
        raise pre.fail(found.relative_at, "registry_name", "relative actions after "
                                                           "normalisation is not supported")


def _check_actions(post: _File, found: _Found) -> FeatureStats:
    if found.unnormalize_at is None or found.action is None:
        raise CheckpointError(post.path, "steps: no unnormalizer_processor step (the model's "
                                         "actions would stay normalised)")
    pre = found.pre_action
    # lerobot builds both from one norm_map and one set of statistics; anything else
    # means the model's targets were scaled otherwise than its outputs would be.
    if pre is not None and (
            pre.mode != found.action.mode or not np.array_equal(pre.low, found.action.low)
            or not np.array_equal(pre.high, found.action.high)):
        raise CheckpointError(post.path, "action statistics of the unnormaliser differ from "
                                         f"the normaliser's in {PREPROCESSOR}")
    if found.absolute_at is not None and found.absolute_at < found.unnormalize_at:
        raise post.fail(found.absolute_at, "registry_name", "absolute actions before "
                                                            "unnormalisation is not supported")
    return found.action


def _relative_actions(directory: Path, found: _Found, action_dim: int, state_dim: int,
                      config_flag: bool | None) -> RelativeActions | None:
    relative = bool(found.relative and found.relative.get("enabled", False))
    absolute = bool(found.absolute)
    if relative != absolute:
        raise CheckpointError(directory / POSTPROCESSOR,
                              f"absolute_actions_processor enabled={absolute} but "
                              f"{PREPROCESSOR}'s relative_actions_processor enabled={relative}")
    if config_flag is not None and config_flag != relative:
        raise CheckpointError(directory / "config.json",
                              f"use_relative_actions={str(config_flag).lower()} but the "
                              f"pipeline's relative actions are {'on' if relative else 'off'}")
    if not relative or found.relative is None:
        return None
    if state_dim < action_dim:
        raise CheckpointError(directory / PREPROCESSOR,
                              f"relative_actions_processor: actions of {action_dim} dimensions "
                              f"are relative to a state of only {state_dim}")
    exclude = _names(found.relative.get("exclude_joints")) or ()
    names = _names(found.relative.get("action_names"))
    mask = relative_mask(action_dim, exclude, names)
    return RelativeActions(mask, exclude, names)


def _names(value: object) -> tuple[str, ...] | None:
    """A list of names :func:`_relative` checked, as a tuple (``None``: not given)."""
    if not isinstance(value, list):
        return None
    return tuple(str(v) for v in value)


def read_lerobot_pipeline(directory: str | Path, *, action_dim: int, state_dim: int,
                          config_relative: bool | None = None) -> LerobotPipeline | None:
    """The pipelines of a lerobot checkpoint directory, or ``None`` when it has none.

    Args:
        directory: The checkpoint directory.
        action_dim: The robot's action dimension (the relative mask's length).
        state_dim: The robot's state dimension.
        config_relative: ``use_relative_actions`` of lerobot's ``config.json``, if it
            says.

    Raises:
        CheckpointError: Naming the file and field of anything the server cannot run.
    """
    root = Path(directory)
    pre_path, post_path = root / PREPROCESSOR, root / POSTPROCESSOR
    if not pre_path.is_file() and not post_path.is_file():
        if config_relative:
            raise CheckpointError(root / "config.json",
                                  f"use_relative_actions is true but there is no {PREPROCESSOR}"
                                  f" / {POSTPROCESSOR} to say which joints are relative")
        return None
    for path in (pre_path, post_path):
        if not path.is_file():
            raise CheckpointError(path, "missing (lerobot saves both pipelines; one alone "
                                        "does not say how the model was trained)")
    found = _Found(files=[PREPROCESSOR, POSTPROCESSOR])
    pre, post = _File(pre_path), _File(post_path)
    _run(pre, _PRE, found)
    _run(post, _POST, found)
    _check_order(pre, found)
    action = _check_actions(post, found)
    assert found.state is not None and found.tokenizer is not None  # _check_order
    relative = _relative_actions(root, found, action_dim, state_dim, config_relative)
    source = found.source or str(pre_path)
    return LerobotPipeline(
        steps=tuple(found.steps),
        normalizer=Normalizer(found.state, action, source),
        relative=relative,
        newline="if_missing" if found.newline_at is not None else "never",
        prompt_tokens=found.max_length,
        tokenizer_dir=found.tokenizer_dir,
        tokenizer_name=str(found.tokenizer.get("tokenizer_name", "")),
        files=tuple(dict.fromkeys(found.files)),
    )
