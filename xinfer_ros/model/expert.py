"""Action expert: a smaller transformer whose action tokens attend to the prefix K/V.

Layout (π0-style "mixture of experts by layer"): the expert has as many layers as the
backbone, with the backbone's number of K/V heads and head width, so that in layer
``l`` its ``H`` action tokens attend to the concatenation of the backbone's cached
keys/values of layer ``l`` (the prefix, computed once by Prefill) and their own keys/
values. Action tokens attend to all prefix tokens and to each other (bidirectional);
the prefix never attends to actions, so its K/V stay valid across all K denoising
steps and are never recomputed. Positions continue after the prefix (RoPE positions
``P .. P+H-1``) and the expert's keys get Qwen3's per-head RMSNorm like the backbone's.

The flow time ``tau`` (0 = noise, 1 = data; see ``xinfer_ros.rtc.masks``) enters by a
sinusoidal embedding concatenated with each action token's embedding and mixed by an
MLP (π0's action-time MLP).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F  # noqa: N812 - conventional alias
from torch import nn
from transformers import Qwen3Config
from transformers.models.qwen3.modeling_qwen3 import (
    Qwen3RMSNorm,
    Qwen3RotaryEmbedding,
    apply_rotary_pos_emb,
)

from xinfer_ros.model.config import VLAConfig

__all__ = ["ActionExpert", "ExpertLayer", "PrefixKV", "time_embedding"]

#: Per-layer ``(keys, values)``, each ``(B, kv_heads, P, head_dim)``.
PrefixKV = list[tuple[torch.Tensor, torch.Tensor]]


def time_embedding(tau: torch.Tensor, dim: int) -> torch.Tensor:
    """Sine-cosine embedding of flow time (π0's periods 4e-3 .. 4).

    Args:
        tau: ``(B,)`` flow times in ``[0, 1]``.
        dim: Even embedding width.

    Returns:
        ``(B, dim)`` embedding in ``tau``'s dtype.
    """
    half = dim // 2
    fraction = torch.linspace(0.0, 1.0, half, device=tau.device, dtype=torch.float32)
    period = 4e-3 * (4.0 / 4e-3) ** fraction
    angle = tau.float()[:, None] * (2.0 * math.pi / period)[None, :]
    return torch.cat([angle.sin(), angle.cos()], dim=-1).to(tau.dtype)


class ExpertLayer(nn.Module):
    """One expert decoder layer attending to one backbone layer's cached K/V."""

    def __init__(self, width: int, mlp: int, heads: int, kv_heads: int, head_dim: int) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, head_dim
        self.input_norm = Qwen3RMSNorm(width)
        self.q_proj = nn.Linear(width, heads * head_dim, bias=False)
        self.k_proj = nn.Linear(width, kv_heads * head_dim, bias=False)
        self.v_proj = nn.Linear(width, kv_heads * head_dim, bias=False)
        self.o_proj = nn.Linear(heads * head_dim, width, bias=False)
        self.q_norm = Qwen3RMSNorm(head_dim)
        self.k_norm = Qwen3RMSNorm(head_dim)
        self.post_norm = Qwen3RMSNorm(width)
        self.gate_proj = nn.Linear(width, mlp, bias=False)
        self.up_proj = nn.Linear(width, mlp, bias=False)
        self.down_proj = nn.Linear(mlp, width, bias=False)

    def forward(
        self,
        hidden: torch.Tensor,
        rope: tuple[torch.Tensor, torch.Tensor],
        prefix_k: torch.Tensor,
        prefix_v: torch.Tensor,
    ) -> torch.Tensor:
        """Run attention over ``[prefix, actions]`` and the MLP.

        Args:
            hidden: ``(B, H, width)`` action-token states.
            rope: ``(cos, sin)`` for the action positions.
            prefix_k: ``(B, kv_heads, P, head_dim)`` cached keys (RoPE already applied).
            prefix_v: ``(B, kv_heads, P, head_dim)`` cached values.

        Returns:
            Updated ``(B, H, width)`` states.
        """
        batch, length, _ = hidden.shape
        x = self.input_norm(hidden)
        q = self.q_norm(self.q_proj(x).view(batch, length, self.heads, self.head_dim))
        k = self.k_norm(self.k_proj(x).view(batch, length, self.kv_heads, self.head_dim))
        v = self.v_proj(x).view(batch, length, self.kv_heads, self.head_dim)
        q, k = apply_rotary_pos_emb(q.transpose(1, 2), k.transpose(1, 2), *rope)
        keys = torch.cat([prefix_k.to(k.dtype), k], dim=2)
        values = torch.cat([prefix_v.to(v.dtype), v.transpose(1, 2)], dim=2)
        attn = F.scaled_dot_product_attention(
            q, keys, values, enable_gqa=self.heads != self.kv_heads
        )
        hidden = hidden + self.o_proj(attn.transpose(1, 2).reshape(batch, length, -1))
        x = self.post_norm(hidden)
        out: torch.Tensor = hidden + self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))
        return out


class ActionExpert(nn.Module):
    """Velocity network ``v(x_tau, tau | prefix K/V)`` of the flow-matching policy."""

    def __init__(self, config: VLAConfig, backbone_config: Qwen3Config) -> None:
        super().__init__()
        exp, bb, act = config.expert, config.backbone, config.action
        width = exp.hidden_size
        if width % 2:
            raise ValueError("expert.hidden_size must be even (time embedding)")
        self.width = width
        self.in_proj = nn.Linear(act.action_dim, width)
        self.time_mlp = nn.Sequential(
            nn.Linear(2 * width, width), nn.SiLU(), nn.Linear(width, width)
        )
        self.layers = nn.ModuleList(
            ExpertLayer(width, exp.intermediate_size, exp.num_heads, bb.num_kv_heads, bb.head_dim)
            for _ in range(bb.num_layers)
        )
        self.norm = Qwen3RMSNorm(width)
        self.out_proj = nn.Linear(width, act.action_dim)
        # Own rotary module (same table as the backbone's) so the expert never calls
        # into the backbone: the backbone runs exactly once per request.
        self.rotary = Qwen3RotaryEmbedding(backbone_config)

    def rope(
        self, positions: torch.Tensor, like: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Return ``(cos, sin)`` for ``(B, H)`` positions in ``like``'s dtype."""
        cos_sin: tuple[torch.Tensor, torch.Tensor] = self.rotary(like, positions)
        return cos_sin

    def forward(
        self,
        x: torch.Tensor,
        tau: torch.Tensor,
        prefix_kv: PrefixKV,
        rope: tuple[torch.Tensor, torch.Tensor],
    ) -> torch.Tensor:
        """Predict the velocity of ``x`` at flow time ``tau``.

        Args:
            x: ``(B, H, D)`` noisy action chunk.
            tau: ``(B,)`` flow times.
            prefix_kv: Per-layer cached prefix keys/values.
            rope: ``(cos, sin)`` of the action positions (see :meth:`rope`).

        Returns:
            ``(B, H, D)`` velocity (``data - noise`` direction).
        """
        tokens = self.in_proj(x)
        t_emb = time_embedding(tau, self.width).to(tokens.dtype)
        t_emb = t_emb[:, None, :].expand_as(tokens)
        hidden = self.time_mlp(torch.cat([tokens, t_emb], dim=-1))
        for layer, (keys, values) in zip(self.layers, prefix_kv, strict=True):
            hidden = layer(hidden, rope, keys, values)
        velocity: torch.Tensor = self.out_proj(self.norm(hidden))
        return velocity
