"""Reference VLA configuration: presets in ``config/models/*.yaml`` and their schema.

A preset names the shapes of the three stages (vision tower, language backbone, action
expert), the camera inputs, the prompt layout and the normalisation statistics. The
same dictionary is written next to a checkpoint by ``save_pretrained`` so a checkpoint
directory is self-describing.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import yaml

from xinfer_ros.config_paths import config_dir
from xinfer_ros.core.constants import ACTION_DIM, DENOISE_STEPS, HORIZON, STATE_DIM

__all__ = [
    "PRESET_DIR",
    "REFERENCE_FAMILY",
    "ActionSpec",
    "BackboneSpec",
    "CameraSpec",
    "ExpertSpec",
    "NormStats",
    "VLAConfig",
    "VisionSpec",
    "available_presets",
    "load_preset",
    "preset_file",
]

#: ``family`` of a reference-model preset (also the default when a file names none).
REFERENCE_FAMILY = "reference"

#: Directory of the shipped presets (``<repo>/config/models``).
PRESET_DIR: Path = config_dir() / "models"

MergeMode = Literal["concat_mlp", "avg_pool"]


@dataclasses.dataclass(frozen=True)
class CameraSpec:
    """One camera input: the model-side image size after resizing.

    Attributes:
        name: Camera name (for error messages and bookkeeping).
        height: Model input height in pixels (a multiple of ``patch * merge``).
        width: Model input width in pixels (a multiple of ``patch * merge``).
    """

    name: str
    height: int
    width: int


@dataclasses.dataclass(frozen=True)
class VisionSpec:
    """SigLIP vision tower and token merge.

    Attributes:
        hidden_size: ViT width.
        num_layers: ViT depth.
        num_heads: Attention heads.
        intermediate_size: MLP width.
        patch_size: Square patch side in pixels (16 for VLA-2B, 14 for π0.5).
        image_size: Side of the square grid the position table is trained for; other
            input shapes interpolate it (see ``xinfer_ros.model.vision``).
        merge: ``"concat_mlp"`` (Qwen-VL style: concatenate 2x2 patches, then an MLP;
            merge inside the encoder) or ``"avg_pool"`` (π0.5: average 2x2 blocks after
            the ViT, then a linear projector).
        merge_factor: Side of the merged block (2 -> 4 patches per token).
    """

    hidden_size: int
    num_layers: int
    num_heads: int
    intermediate_size: int
    patch_size: int = 16
    image_size: int = 224
    merge: MergeMode = "concat_mlp"
    merge_factor: int = 2


@dataclasses.dataclass(frozen=True)
class BackboneSpec:
    """Qwen3-style decoder language backbone.

    Attributes:
        hidden_size: Model width.
        num_layers: Decoder layers (the action expert has the same number).
        num_heads: Query heads.
        num_kv_heads: Key/value heads (grouped-query attention).
        head_dim: Per-head width (shared with the action expert).
        intermediate_size: SwiGLU MLP width.
        vocab_size: Embedding rows; at least the tokenizer's vocabulary.
        rope_theta: RoPE base.
        max_position_embeddings: Longest prefix plus action tokens.
    """

    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    rope_theta: float = 1_000_000.0
    max_position_embeddings: int = 4096


@dataclasses.dataclass(frozen=True)
class ExpertSpec:
    """Action expert: a smaller transformer with the backbone's depth and K/V layout.

    Attributes:
        hidden_size: Expert width.
        intermediate_size: Expert MLP width.
        num_heads: Expert query heads (K/V heads and head_dim come from the backbone,
            because action tokens attend to the backbone's cached keys and values).
    """

    hidden_size: int
    intermediate_size: int
    num_heads: int


@dataclasses.dataclass(frozen=True)
class ActionSpec:
    """Action chunk, flow matching and robot state layout.

    Attributes:
        horizon: Keyframes per chunk H.
        action_dim: Action dimension D.
        num_steps: Euler steps K.
        beta: RTC guidance weight clip.
        state_dim: Robot state dimension.
        state_pad_dim: State is zero-padded to this many dims before binning (one
            token per dim).
        state_bins: Number of discretisation bins (256).
        state_format: ``"tokens"`` (one state-bin token per padded dim, between
            STATE_BEGIN/STATE_END markers) or ``"text"`` (π0.5's state-as-text: the bin
            numbers written out, space-separated, and tokenised like text).
    """

    horizon: int = HORIZON
    action_dim: int = ACTION_DIM
    num_steps: int = DENOISE_STEPS
    beta: float = 5.0
    state_dim: int = STATE_DIM
    state_pad_dim: int = STATE_DIM
    state_bins: int = 256
    state_format: Literal["tokens", "text"] = "tokens"


@dataclasses.dataclass(frozen=True)
class NormStats:
    """Mean/std normalisation of state and actions (identity by default).

    Attributes:
        state_mean: Per-dim state mean, or ``None`` for 0.
        state_std: Per-dim state std, or ``None`` for 1.
        action_mean: Per-dim action mean, or ``None`` for 0.
        action_std: Per-dim action std, or ``None`` for 1.
    """

    state_mean: tuple[float, ...] | None = None
    state_std: tuple[float, ...] | None = None
    action_mean: tuple[float, ...] | None = None
    action_std: tuple[float, ...] | None = None


@dataclasses.dataclass(frozen=True)
class VLAConfig:
    """Everything needed to build the reference VLA.

    Attributes:
        name: Preset name.
        cameras: Camera inputs in request order.
        vision: Vision tower.
        backbone: Language backbone.
        expert: Action expert.
        action: Chunk / flow / state layout.
        norm: Normalisation statistics.
        prompt_template: Text around the instruction; ``{instruction}`` is replaced.
        dtype: Parameter dtype name (``float32``, ``bfloat16``, ``float16``).
        seed: Seed of the random weights.
    """

    name: str
    cameras: tuple[CameraSpec, ...]
    vision: VisionSpec
    backbone: BackboneSpec
    expert: ExpertSpec
    action: ActionSpec = dataclasses.field(default_factory=ActionSpec)
    norm: NormStats = dataclasses.field(default_factory=NormStats)
    prompt_template: str = "Task: {instruction}\n"
    dtype: str = "float32"
    seed: int = 0

    def __post_init__(self) -> None:
        stride = self.vision.patch_size * self.vision.merge_factor
        for cam in self.cameras:
            if cam.height % stride or cam.width % stride:
                raise ValueError(
                    f"camera {cam.name}: {cam.height}x{cam.width} is not a multiple of "
                    f"patch_size*merge_factor={stride}"
                )
        if self.action.state_pad_dim < self.action.state_dim:
            raise ValueError("action.state_pad_dim must be >= action.state_dim")
        if self.action.state_format not in ("tokens", "text"):
            raise ValueError("action.state_format must be 'tokens' or 'text'")
        if "{instruction}" not in self.prompt_template:
            raise ValueError("prompt_template must contain '{instruction}'")

    @property
    def visual_tokens_per_camera(self) -> tuple[int, ...]:
        """Visual tokens each camera contributes after the token merge."""
        stride = self.vision.patch_size * self.vision.merge_factor
        return tuple((c.height // stride) * (c.width // stride) for c in self.cameras)

    @property
    def num_visual_tokens(self) -> int:
        """Total visual tokens over all cameras (217 for the paper's inputs)."""
        return sum(self.visual_tokens_per_camera)

    def to_dict(self) -> dict[str, Any]:
        """Return a plain (YAML/JSON-serialisable) dictionary."""
        data = dataclasses.asdict(self)
        data["cameras"] = [dataclasses.asdict(c) for c in self.cameras]
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> VLAConfig:
        """Build from a dictionary as written by :meth:`to_dict` or a preset file.

        Raises:
            ValueError: On unknown or missing keys.
        """
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"unknown config keys: {sorted(unknown)}")
        norm = {k: (tuple(v) if v is not None else None) for k, v in data.get("norm", {}).items()}
        return cls(
            name=str(data["name"]),
            cameras=tuple(CameraSpec(**c) for c in data["cameras"]),
            vision=VisionSpec(**data["vision"]),
            backbone=BackboneSpec(**data["backbone"]),
            expert=ExpertSpec(**data["expert"]),
            action=ActionSpec(**data.get("action", {})),
            norm=NormStats(**norm),
            prompt_template=str(data.get("prompt_template", "Task: {instruction}\n")),
            dtype=str(data.get("dtype", "float32")),
            seed=int(data.get("seed", 0)),
        )

    @classmethod
    def from_yaml(cls, path: str | Path) -> VLAConfig:
        """Load a preset file."""
        with Path(path).open(encoding="utf-8") as handle:
            return cls.from_dict(yaml.safe_load(handle))

    def replace(self, **changes: Any) -> VLAConfig:
        """Return a copy with top-level fields replaced (nested specs as objects)."""
        return dataclasses.replace(self, **changes)


def available_presets() -> list[str]:
    """Names of the presets shipped in :data:`PRESET_DIR`."""
    return sorted(p.stem for p in PRESET_DIR.glob("*.yaml"))


def preset_file(name_or_path: str | Path) -> Path:
    """The YAML file of a preset given by name (``tiny``, ``pi0``, ...) or by path.

    Raises:
        FileNotFoundError: If neither a preset nor a file of that name exists.
    """
    path = Path(name_or_path)
    if path.suffix not in {".yaml", ".yml"}:
        path = PRESET_DIR / f"{name_or_path}.yaml"
    if not path.is_file():
        raise FileNotFoundError(
            f"no model preset {name_or_path!r}; available: {available_presets()}"
        )
    return path


def load_preset(name_or_path: str | Path) -> VLAConfig:
    """Load a reference-model preset by name (``tiny``, ``vla-2b``, ``pi05``) or YAML path.

    Raises:
        FileNotFoundError: If neither a preset nor a file of that name exists.
        ValueError: If the preset is not a reference-model preset (e.g. ``pi0``).
    """
    path = preset_file(name_or_path)
    with path.open(encoding="utf-8") as handle:
        data = yaml.safe_load(handle)
    family = data.get("family", REFERENCE_FAMILY) if isinstance(data, dict) else None
    if family != REFERENCE_FAMILY:
        raise ValueError(f"model preset {name_or_path!r} is of family {family!r}, not the "
                         "reference VLA; load it with xinfer_ros.model.presets")
    return VLAConfig.from_dict({k: v for k, v in data.items() if k != "family"})
