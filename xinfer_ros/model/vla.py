"""The reference VLA: SigLIP vision tower, Qwen3 backbone and action expert.

Weights are seeded random by default (no checkpoint can be downloaded here);
:meth:`ReferenceVLA.save_pretrained` / :meth:`ReferenceVLA.from_pretrained` write and
read a local checkpoint directory (``model.safetensors`` + ``xinfer_config.json``).
The module holds weights only; per-request state lives in
:class:`xinfer_ros.model.request.RequestState` and the stages in
:mod:`xinfer_ros.model.stages`.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import nn
from transformers import Qwen3Config, Qwen3Model
from transformers.models.qwen3.modeling_qwen3 import Qwen3RotaryEmbedding
from transformers.models.siglip.modeling_siglip import SiglipVisionEmbeddings

from xinfer_ros.model.config import VLAConfig
from xinfer_ros.model.expert import ActionExpert
from xinfer_ros.model.tokenizer import ByteTokenizer
from xinfer_ros.model.vision import VisionTower

__all__ = [
    "CONFIG_FILE",
    "WEIGHTS_FILE",
    "ReferenceVLA",
    "build_qwen3_config",
    "resolve_dtype",
]

#: Checkpoint file names inside a ``save_pretrained`` directory.
WEIGHTS_FILE = "model.safetensors"
CONFIG_FILE = "xinfer_config.json"

_DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
}


def resolve_dtype(name: str) -> torch.dtype:
    """Map a dtype name from a preset to a torch dtype.

    Raises:
        ValueError: On an unknown name.
    """
    try:
        return _DTYPES[name]
    except KeyError:
        raise ValueError(f"unknown dtype {name!r}; use one of {sorted(_DTYPES)}") from None


def build_qwen3_config(config: VLAConfig) -> Qwen3Config:
    """Return the transformers Qwen3 config of the backbone (SDPA attention, no sliding)."""
    spec = config.backbone
    qwen = Qwen3Config(
        vocab_size=spec.vocab_size,
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_layers,
        num_attention_heads=spec.num_heads,
        num_key_value_heads=spec.num_kv_heads,
        head_dim=spec.head_dim,
        max_position_embeddings=spec.max_position_embeddings,
        rope_parameters={"rope_type": "default", "rope_theta": spec.rope_theta},
        use_sliding_window=False,
        tie_word_embeddings=False,
        pad_token_id=ByteTokenizer.PAD,
        bos_token_id=ByteTokenizer.BOS,
        eos_token_id=ByteTokenizer.EOS,
    )
    qwen._attn_implementation = "sdpa"
    return qwen


class ReferenceVLA(nn.Module):
    """Weights of the three stages plus the tokenizer; see :mod:`xinfer_ros.model.stages`."""

    def __init__(self, config: VLAConfig) -> None:
        super().__init__()
        self.config = config
        self.tokenizer = ByteTokenizer(config.action.state_bins)
        if config.backbone.vocab_size < self.tokenizer.vocab_size:
            raise ValueError(
                f"backbone.vocab_size {config.backbone.vocab_size} < tokenizer vocabulary "
                f"{self.tokenizer.vocab_size}"
            )
        self.backbone_config = build_qwen3_config(config)
        self.vision = VisionTower(config)
        self.backbone = Qwen3Model(self.backbone_config)
        self.expert = ActionExpert(config, self.backbone_config)

    @property
    def device(self) -> torch.device:
        """Device of the parameters."""
        return next(self.parameters()).device

    @property
    def dtype(self) -> torch.dtype:
        """Dtype of the parameters."""
        return next(self.parameters()).dtype

    @classmethod
    def build(
        cls,
        config: VLAConfig,
        device: str | torch.device = "cpu",
        seed: int | None = None,
        dtype: torch.dtype | None = None,
    ) -> ReferenceVLA:
        """Build the model with seeded random weights, in eval mode, without grads.

        The global RNG is forked, so building a model does not disturb the caller's
        random stream.

        Args:
            config: Model configuration.
            device: Target device; ``"meta"`` builds shapes only (FLOP counting).
            seed: Weight seed; ``config.seed`` when ``None``.
            dtype: Parameter dtype; ``config.dtype`` when ``None``.
        """
        seed = config.seed if seed is None else seed
        dtype = resolve_dtype(config.dtype) if dtype is None else dtype
        if str(device) == "meta":
            with torch.device("meta"):
                model = cls(config)
        else:
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(seed)
                model = cls(config)
        model = model.to(device=device, dtype=dtype)
        model.eval()
        # Guidance differentiates w.r.t. the noisy actions only, never the weights.
        model.requires_grad_(False)
        return model

    def num_parameters_by_stage(self) -> dict[str, int]:
        """Parameter count of each stage's module."""
        return {
            "vit": sum(p.numel() for p in self.vision.parameters()),
            "prefill": sum(p.numel() for p in self.backbone.parameters()),
            "action": sum(p.numel() for p in self.expert.parameters()),
        }

    def save_pretrained(self, directory: str | Path) -> Path:
        """Write ``model.safetensors`` and ``xinfer_config.json`` into ``directory``.

        Returns:
            The directory.
        """
        out = Path(directory)
        out.mkdir(parents=True, exist_ok=True)
        tensors = {k: v.detach().contiguous().cpu() for k, v in self.state_dict().items()}
        save_file(tensors, str(out / WEIGHTS_FILE), metadata={"format": "pt"})
        (out / CONFIG_FILE).write_text(
            json.dumps(self.config.to_dict(), indent=2) + "\n", encoding="utf-8"
        )
        return out

    @classmethod
    def from_pretrained(
        cls,
        directory: str | Path,
        device: str | torch.device = "cpu",
        dtype: torch.dtype | None = None,
    ) -> ReferenceVLA:
        """Load a checkpoint directory written by :meth:`save_pretrained` (offline).

        Raises:
            FileNotFoundError: If the config or weights file is missing.
        """
        src = Path(directory)
        for name in (CONFIG_FILE, WEIGHTS_FILE):
            if not (src / name).is_file():
                raise FileNotFoundError(f"{src / name} not found")
        config = VLAConfig.from_dict(json.loads((src / CONFIG_FILE).read_text(encoding="utf-8")))
        dtype = resolve_dtype(config.dtype) if dtype is None else dtype
        with torch.device("meta"):
            model = cls(config)
        # Build on meta and assign the loaded tensors: no wasted random init of 2B params.
        model.load_state_dict(load_file(str(src / WEIGHTS_FILE)), strict=True, assign=True)
        model = _materialize_buffers(model)
        model = model.to(device=device, dtype=dtype)
        model.eval()
        model.requires_grad_(False)
        return model


def _materialize_buffers(model: ReferenceVLA) -> ReferenceVLA:
    """Recreate non-persistent buffers (RoPE tables, position ids) left on meta.

    They are computed from the config, not learned, so a fresh CPU instance of the
    owning module provides them; only these small modules are rebuilt.
    """
    for owner in model.modules():
        metas = [name for name, buf in owner.named_buffers(recurse=False) if buf.is_meta]
        if not metas:
            continue
        if isinstance(owner, Qwen3RotaryEmbedding):
            fresh: nn.Module = Qwen3RotaryEmbedding(owner.config)
        elif isinstance(owner, SiglipVisionEmbeddings):
            fresh = SiglipVisionEmbeddings(owner.config)
        else:
            raise RuntimeError(f"cannot rebuild buffers {metas} of {type(owner).__name__}")
        fresh_buffers = dict(fresh.named_buffers(recurse=False))
        for name in metas:
            owner.register_buffer(name, fresh_buffers[name].clone(), persistent=False)
    return model
