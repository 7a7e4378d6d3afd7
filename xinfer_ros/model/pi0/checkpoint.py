"""π0 weights: loading a checkpoint directory, seeded random weights, writing checkpoints.

Loading goes through ``PI0ForConditionalGeneration.from_pretrained`` (offline), so both
layouts it reads work: transformers' own and lerobot's key names, which transformers'
``conversion_mapping`` renames. A missing or mis-shaped weight is an error naming the
directory; transformers alone would initialise a missing weight at random with a
warning, which would serve noise.

Writing is for exports and tests: :func:`save_checkpoint` writes either layout; the
lerobot one renames every key by :func:`lerobot_key`, the inverse of transformers'
mapping.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import numpy.typing as npt
import torch
from transformers import PI0Config, PI0ForConditionalGeneration

from xinfer_ros.model.errors import CheckpointError
from xinfer_ros.model.pi0.lerobot_pipeline import POSTPROCESSOR, PREPROCESSOR
from xinfer_ros.model.pi0.normalization import OPENPI_STATS
from xinfer_ros.model.vla import resolve_dtype

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from xinfer_ros.model.pi0.preset import Pi0Spec

__all__ = [
    "build_model",
    "lerobot_key",
    "save_checkpoint",
    "write_lerobot_pipeline",
    "write_openpi_stats",
]

_LOG = logging.getLogger("xinfer_ros.model.pi0")

Layout = Literal["transformers", "lerobot"]

#: transformers name prefix -> lerobot name prefix (lerobot nests everything in ``model.``).
_LEROBOT_PREFIXES = (
    ("model.vlm.language_model.embed_tokens.", "model.paligemma_with_expert.paligemma.lm_head."),
    ("model.dit.embed_tokens.", "model.paligemma_with_expert.gemma_expert.lm_head."),
    ("model.vlm.", "model.paligemma_with_expert.paligemma.model."),
    ("model.dit.", "model.paligemma_with_expert.gemma_expert.model."),
    ("embed_action_time.", "model."),
    ("", "model."),
)


def lerobot_key(name: str) -> str:
    """The lerobot name of a ``PI0ForConditionalGeneration`` state-dict key.

    lerobot's hub checkpoints store the (tied) embeddings as ``lm_head``; transformers'
    mapping renames them back to ``embed_tokens``.
    """
    for ours, theirs in _LEROBOT_PREFIXES:
        if name.startswith(ours):
            return theirs + name[len(ours):]
    raise AssertionError("unreachable: the last prefix matches every name")


def _dtype(spec: Pi0Spec, dtype: torch.dtype | str | None) -> torch.dtype:
    if dtype is None:
        return resolve_dtype(spec.dtype)
    return resolve_dtype(dtype) if isinstance(dtype, str) else dtype


def build_model(config: PI0Config, spec: Pi0Spec, device: str | torch.device = "cpu",
                dtype: torch.dtype | str | None = None) -> PI0ForConditionalGeneration:
    """The model of a resolved spec, in eval mode and without gradients on weights.

    On ``device="meta"``: shapes only (FLOP counting), never read from disk. Else
    ``spec.model_path`` set: its weights (either layout); otherwise seeded random
    weights (``spec.seed``, the global RNG untouched).

    Raises:
        CheckpointError: On weights missing from the directory or of the wrong shape.
    """
    torch_dtype = _dtype(spec, dtype)
    model: Any  # transformers' decorated methods confuse type checkers
    if str(device) == "meta":
        with torch.device("meta"):
            model = PI0ForConditionalGeneration(config)
    elif spec.model_path is not None:
        model = _load(config, Path(spec.model_path), torch_dtype)
    else:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(spec.seed)
            # Initialising on a CUDA device takes seconds where a 3B CPU init takes minutes.
            with torch.device(device):
                model = PI0ForConditionalGeneration(config)
    model = model.to(device=device, dtype=torch_dtype)
    model.eval()
    # RTC guidance differentiates w.r.t. the noisy actions only, never the weights.
    model.requires_grad_(False)
    built: PI0ForConditionalGeneration = model
    return built


def _load(config: PI0Config, directory: Path, dtype: torch.dtype) -> PI0ForConditionalGeneration:
    model: PI0ForConditionalGeneration
    try:
        loaded: Any = PI0ForConditionalGeneration.from_pretrained(
            str(directory), config=config, dtype=dtype, local_files_only=True,
            output_loading_info=True)
        model, info = loaded
    except (OSError, RuntimeError, ValueError) as exc:
        # transformers raises RuntimeError for weights of the wrong shape.
        raise CheckpointError(directory, f"weights do not load: {_first_line(exc)}") from exc
    missing = sorted(info.get("missing_keys", ()))
    if missing:
        raise CheckpointError(directory, f"{len(missing)} weights missing, e.g. {missing[:4]}")
    mismatched = sorted(str(k) for k in info.get("mismatched_keys", ()))
    if mismatched:
        raise CheckpointError(directory, f"{len(mismatched)} weights of the wrong shape, "
                                         f"e.g. {mismatched[:4]}")
    unexpected = sorted(info.get("unexpected_keys", ()))
    if unexpected:
        _LOG.warning("%s: %d weights the model does not use, e.g. %s", directory,
                     len(unexpected), unexpected[:4])
    return model


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def save_checkpoint(model: PI0ForConditionalGeneration, directory: str | Path, *,
                    layout: Layout = "transformers",
                    tokenizer: PreTrainedTokenizerBase | None = None) -> Path:
    """Write a checkpoint that :func:`build_model` (and transformers) can load.

    Args:
        model: The model.
        directory: Output directory (created).
        layout: ``transformers`` (``save_pretrained``) or ``lerobot`` (the same
            ``config.json``, weights under lerobot's key names).
        tokenizer: Saved beside the weights when given.

    Returns:
        The directory.
    """
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(out))
    if layout == "lerobot":
        from safetensors.torch import save_file

        weights = out / "model.safetensors"
        renamed = {lerobot_key(k): v.detach().contiguous().cpu()
                   for k, v in model.state_dict().items()}
        save_file(renamed, str(weights), metadata={"format": "pt"})
    elif layout != "transformers":
        raise ValueError(f"unknown layout {layout!r}")
    if tokenizer is not None:
        tokenizer.save_pretrained(str(out))
    return out


def _lists(stats: Mapping[str, npt.ArrayLike]) -> dict[str, list[float]]:
    return {k: np.asarray(v, dtype=np.float64).reshape(-1).tolist() for k, v in stats.items()}


def write_openpi_stats(directory: str | Path, state: Mapping[str, npt.ArrayLike],
                       actions: Mapping[str, npt.ArrayLike], asset: str | None = None) -> Path:
    """Write openpi's ``norm_stats.json`` (top level, or under ``assets/<asset>/``)."""
    folder = Path(directory) / "assets" / asset if asset else Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / OPENPI_STATS
    payload = {"norm_stats": {"state": _lists(state), "actions": _lists(actions)}}
    path.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    return path


def _step(name: str, config: Mapping[str, object], **extra: object) -> dict[str, object]:
    return {"registry_name": name, "config": dict(config), **extra}


def write_lerobot_pipeline(directory: str | Path, state: Mapping[str, npt.ArrayLike],
                           action: Mapping[str, npt.ArrayLike], *, state_mode: str = "MEAN_STD",
                           action_mode: str = "MEAN_STD", relative: bool = False,
                           exclude_joints: tuple[str, ...] = ("gripper",),
                           action_names: list[str] | None = None, max_length: int = 48,
                           tokenizer: PreTrainedTokenizerBase | None = None,
                           cameras: tuple[str, ...] = ("front",)) -> tuple[Path, Path]:
    """Write lerobot's π0 pipelines as ``make_pi0_pre_post_processors`` saves them.

    ``policy_preprocessor.json`` (rename, batch, newline, tokenizer, device, relative
    actions, normaliser) and ``policy_postprocessor.json`` (unnormaliser, absolute
    actions, device), with the normaliser statistics in their safetensors files.

    Args:
        directory: Checkpoint directory (created).
        state: Statistics of ``observation.state`` by name (``mean``, ``std``, ...).
        action: Statistics of ``action``.
        state_mode: lerobot's mode of the STATE features.
        action_mode: lerobot's mode of the ACTION features.
        relative: ``use_relative_actions``.
        exclude_joints: ``relative_exclude_joints``.
        action_names: The action names (lerobot's ``action_feature_names``).
        max_length: ``tokenizer_max_length``.
        tokenizer: Saved as the tokenizer step's artifact (``tokenizer/``) when given;
            else the step names PaliGemma's Hub tokenizer.
        cameras: Image feature names (``observation.images.<name>``).

    Returns:
        The two pipeline files.
    """
    from safetensors.numpy import save_file

    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    state_vectors = {k: np.asarray(v, np.float32).reshape(-1) for k, v in state.items()}
    action_vectors = {k: np.asarray(v, np.float32).reshape(-1) for k, v in action.items()}
    width = {"observation.state": len(next(iter(state_vectors.values()))),
             "action": len(next(iter(action_vectors.values())))}
    features = {f"observation.images.{c}": {"type": "VISUAL", "shape": [3, 224, 224]}
                for c in cameras}
    features["observation.state"] = {"type": "STATE", "shape": [width["observation.state"]]}
    features["action"] = {"type": "ACTION", "shape": [width["action"]]}
    norm = {"eps": 1e-8, "norm_map": {"VISUAL": "IDENTITY", "STATE": state_mode,
                                      "ACTION": action_mode}}
    pre_stats = "policy_preprocessor_step_6_normalizer_processor.safetensors"
    post_stats = "policy_postprocessor_step_0_unnormalizer_processor.safetensors"
    flat = {f"observation.state.{k}": v for k, v in state_vectors.items()}
    flat.update({f"action.{k}": v for k, v in action_vectors.items()})
    save_file(flat, str(root / pre_stats))
    save_file({f"action.{k}": v for k, v in action_vectors.items()}, str(root / post_stats))
    tokenizer_step = _step("tokenizer_processor", {
        "max_length": max_length, "task_key": "task", "padding_side": "right",
        "padding": "max_length", "truncation": True,
        "tokenizer_name": "tokenizer" if tokenizer is not None else "google/paligemma-3b-pt-224"})
    if tokenizer is not None:
        tokenizer.save_pretrained(str(root / "tokenizer"))
        tokenizer_step["artifacts"] = {"tokenizer_name": "tokenizer"}
    pre = {"name": "policy_preprocessor", "steps": [
        _step("rename_observations_processor", {"rename_map": {}}),
        _step("to_batch_processor", {}),
        _step("pi0_new_line_processor", {}),
        tokenizer_step,
        _step("device_processor", {"device": "cpu", "float_dtype": None}),
        _step("relative_actions_processor", {"enabled": relative,
                                             "exclude_joints": list(exclude_joints),
                                             "action_names": action_names}),
        _step("normalizer_processor", norm | {"features": features}, state_file=pre_stats),
    ]}
    post = {"name": "policy_postprocessor", "steps": [
        _step("unnormalizer_processor", norm | {"features": {"action": features["action"]}},
              state_file=post_stats),
        _step("absolute_actions_processor", {"enabled": relative}),
        _step("device_processor", {"device": "cpu", "float_dtype": None}),
    ]}
    paths = (root / PREPROCESSOR, root / POSTPROCESSOR)
    for path, payload in zip(paths, (pre, post), strict=True):
        path.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    return paths
