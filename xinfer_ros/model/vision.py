"""Vision stage module: a transformers SigLIP tower, a 2x2 token merge and a projector.

Non-square inputs: SigLIP's learned position table is a square grid
(``image_size / patch_size`` per side, 14x14 for 224 / 16). The cameras here are not
square (224x352 -> 14x22 patches), so the tower is always called with
``interpolate_pos_encoding=True``: transformers bicubically resizes the square table
to the actual ``(H / p) x (W / p)`` grid, keeping row/column structure (each patch gets
the embedding of its relative 2-D location). This is how PaliGemma/SigLIP checkpoints
are run at other resolutions; it is deterministic and costs one small interpolation per
camera batch.
"""

from __future__ import annotations

import torch
from torch import nn
from transformers import SiglipVisionConfig, SiglipVisionModel

from xinfer_ros.model.config import VLAConfig

__all__ = ["VisionTower", "build_siglip_config"]


def build_siglip_config(config: VLAConfig) -> SiglipVisionConfig:
    """Return the transformers SigLIP vision config of a preset (no pooling head)."""
    spec = config.vision
    siglip = SiglipVisionConfig(
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_layers,
        num_attention_heads=spec.num_heads,
        num_channels=3,
        image_size=spec.image_size,
        patch_size=spec.patch_size,
        vision_use_head=False,
    )
    siglip._attn_implementation = "sdpa"
    return siglip


class VisionTower(nn.Module):
    """SigLIP encoder + 2x2 merge + projection to the backbone width."""

    def __init__(self, config: VLAConfig) -> None:
        super().__init__()
        self.spec = config.vision
        self.siglip = SiglipVisionModel(build_siglip_config(config))
        hidden, out = config.vision.hidden_size, config.backbone.hidden_size
        group = config.vision.merge_factor**2
        if config.vision.merge == "concat_mlp":
            # Qwen-VL style: 4 neighbouring patches concatenated, then a 2-layer MLP.
            self.merger: nn.Module = nn.Sequential(
                nn.LayerNorm(hidden * group),
                nn.Linear(hidden * group, hidden * group),
                nn.GELU(),
                nn.Linear(hidden * group, out),
            )
        elif config.vision.merge == "avg_pool":
            # π0.5 style: average 2x2 blocks after the ViT, then a linear projector.
            self.merger = nn.Linear(hidden, out)
        else:
            raise ValueError(f"unknown vision.merge {config.vision.merge!r}")

    def merge_tokens(self, features: torch.Tensor, grid_h: int, grid_w: int) -> torch.Tensor:
        """Merge ``m x m`` patch blocks of ``(B, grid_h*grid_w, C)`` features.

        Returns:
            ``(B, (grid_h/m)*(grid_w/m), backbone_hidden)`` tokens, row-major.
        """
        m = self.spec.merge_factor
        batch, _, chans = features.shape
        grid = features.view(batch, grid_h // m, m, grid_w // m, m, chans)
        if self.spec.merge == "avg_pool":
            pooled = grid.mean(dim=(2, 4)).reshape(batch, -1, chans)
            merged: torch.Tensor = self.merger(pooled)
            return merged
        blocks = grid.permute(0, 1, 3, 2, 4, 5).reshape(batch, -1, m * m * chans)
        merged = self.merger(blocks)
        return merged

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        """Encode one batch of same-shape cameras.

        Args:
            pixels: ``(B, 3, H, W)`` normalised pixels.

        Returns:
            ``(B, tokens_per_camera, backbone_hidden)`` visual tokens.
        """
        height, width = pixels.shape[-2:]
        patch = self.spec.patch_size
        out = self.siglip(pixel_values=pixels, interpolate_pos_encoding=True)
        return self.merge_tokens(out.last_hidden_state, height // patch, width // patch)
