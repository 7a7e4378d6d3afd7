"""FLOPs per stage (meta device) against analytic lower/upper bounds."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from xinfer_ros.model.config import load_preset  # noqa: E402
from xinfer_ros.model.flops import count_stage_flops  # noqa: E402
from xinfer_ros.model.vla import ReferenceVLA  # noqa: E402

pytestmark = pytest.mark.torch


def _linear_params(module: torch.nn.Module) -> int:
    return sum(m.weight.numel() for m in module.modules() if isinstance(m, torch.nn.Linear))


def test_tiny_flops_match_analytic_counts() -> None:
    config = load_preset("tiny")
    model = ReferenceVLA.build(config, device="meta")
    guided = count_stage_flops(config, rtc=True)
    free = count_stage_flops(config, rtc=False)
    prefix = guided["prefix_len"]
    assert prefix == free["prefix_len"] > 217
    bb, ex, vi, act = config.backbone, config.expert, config.vision, config.action
    # Prefill: 2 FLOPs per weight per token + QK^T and AV (4 P^2 heads*head_dim per layer).
    prefill = 2 * prefix * _linear_params(model.backbone)
    prefill += bb.num_layers * 4 * prefix * prefix * bb.num_heads * bb.head_dim
    assert free["prefill"] == pytest.approx(prefill, rel=0.01)
    # Action (unguided): K steps of H tokens attending to P + H keys.
    step = 2 * act.horizon * _linear_params(model.expert)
    step += bb.num_layers * 4 * act.horizon * (prefix + act.horizon) * ex.num_heads * bb.head_dim
    assert free["action"] == pytest.approx(act.num_steps * step, rel=0.01)
    # Guidance adds the VJP w.r.t. the input (about two more forward-sized passes).
    assert 2.0 * free["action"] <= guided["action"] <= 3.5 * free["action"]
    # ViT: patch conv + linears per patch + attention within each camera image.
    patches = [(c.height // vi.patch_size) * (c.width // vi.patch_size) for c in config.cameras]
    vit = sum(2 * n * (3 * vi.patch_size**2) * vi.hidden_size for n in patches)
    vit += sum(2 * n * _linear_params(model.vision.siglip) for n in patches)
    vit += sum(vi.num_layers * 4 * n * n * vi.hidden_size for n in patches)
    merged = [n // vi.merge_factor**2 for n in patches]
    vit += sum(2 * m * _linear_params(model.vision.merger) for m in merged)
    assert free["vit"] == pytest.approx(vit, rel=0.01)
    assert guided["vit"] == free["vit"]
    assert guided["prefill"] == free["prefill"]
