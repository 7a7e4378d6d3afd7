"""Real-time chunking on π0 (time from 1 = noise to 0 = data): guidance and the prefix."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from xinfer_ros.core.stages import Stage  # noqa: E402
from xinfer_ros.model.pi0 import stages  # noqa: E402
from xinfer_ros.model.pi0.processing import Pi0Inputs, Pi0Processor  # noqa: E402
from xinfer_ros.model.synthetic import synthetic_inputs  # noqa: E402

pytestmark = pytest.mark.torch

D_COMMIT, SHIFT = 5, 3


def _prefilled(model: Any, seed: int, mode: str, beta: float | None = None) -> Any:
    """A prepared RTC request (``beta`` overrides the preset's guidance clip)."""
    inputs = synthetic_inputs(model.io, seed=1)
    processor = model.processor
    if beta is not None:
        processor = Pi0Processor(dataclasses.replace(processor.spec, beta=beta),
                                 processor.tokenizer)
    return processor.prepare(Pi0Inputs(inputs.images, "stack the blocks", inputs.state),
                             prev_chunk=inputs.prev_chunk, d=D_COMMIT, prev_shift=SHIFT,
                             rtc_mode=mode, seed=seed)


def _run(pi0_tiny: Any, prepared: Any, guidance: bool = True) -> Any:
    state = stages.Pi0State(prepared)
    pi0_tiny.vit(state)
    pi0_tiny.prefill(state)
    pi0_tiny.action(state, guidance=guidance)
    return state


def _masked_error(actions: torch.Tensor, prepared: Any) -> float:
    rtc = prepared.rtc
    dim = rtc.aligned_norm.shape[1]
    target = torch.from_numpy(rtc.aligned_norm)
    w = torch.from_numpy(rtc.weights)[:, None]
    diff = (actions[0, :, :dim] - target)[rtc.frozen:] * w[rtc.frozen:]
    return float((diff ** 2).sum())


def test_guidance_reduces_the_masked_error_to_the_previous_chunk(pi0_tiny: Any) -> None:
    guided, free = [], []
    for seed in range(3):
        prepared = _prefilled(pi0_tiny, seed, "soft")
        guided.append(_masked_error(_run(pi0_tiny, prepared).actions, prepared))
        free.append(_masked_error(_run(pi0_tiny, prepared, guidance=False).actions, prepared))
    assert all(g < f for g, f in zip(guided, free, strict=True))
    assert np.mean(guided) < 0.5 * np.mean(free)


def test_guidance_error_shrinks_with_beta(pi0_tiny: Any) -> None:
    errors = [_masked_error(_run(pi0_tiny, p).actions, p)
              for p in (_prefilled(pi0_tiny, 7, "soft", beta=0.0),
                        _prefilled(pi0_tiny, 7, "soft", beta=5.0))]
    assert errors[1] < errors[0]


@pytest.mark.parametrize("mode", ["hard", "soft"])
def test_committed_prefix_is_exact(pi0_tiny: Any, mode: str) -> None:
    prepared = _prefilled(pi0_tiny, 0, mode)
    state = _run(pi0_tiny, prepared)
    rtc = prepared.rtc
    dim = rtc.aligned_norm.shape[1]
    assert torch.equal(state.actions[0, :D_COMMIT, :dim],
                       torch.from_numpy(rtc.aligned_norm[:D_COMMIT]))
    chunk = pi0_tiny.finish(state)
    prev = synthetic_inputs(pi0_tiny.io, seed=1).prev_chunk
    np.testing.assert_array_equal(chunk[:D_COMMIT], prev[SHIFT:SHIFT + D_COMMIT])
    assert not np.allclose(chunk[D_COMMIT:], chunk[D_COMMIT - 1])


def test_hard_mode_guides_only_the_committed_keyframes(pi0_tiny: Any) -> None:
    hard, soft = _prefilled(pi0_tiny, 0, "hard"), _prefilled(pi0_tiny, 0, "soft")
    assert float(hard.rtc.weights[D_COMMIT:].sum()) == 0.0
    assert float(soft.rtc.weights[D_COMMIT:].sum()) > 0.0
    assert _masked_error(_run(pi0_tiny, soft).actions, soft) < \
        _masked_error(_run(pi0_tiny, hard).actions, soft)


def test_guided_velocity_is_the_vjp_in_transformers_time(pi0_tiny: Any) -> None:
    """``v − w · (∂x̂/∂x)ᵀ [W ⊙ (Y − x̂)]`` with ``x̂ = x − t·v`` (t = 1 is noise)."""
    model = pi0_tiny.module
    prepared = _prefilled(pi0_tiny, 0, "soft")
    state = stages.Pi0State(prepared)
    pi0_tiny.vit(state)
    pi0_tiny.prefill(state)
    assert state.progress is Stage.ACTION
    prefix = tuple(t for kv in state.prefix_kv for t in kv)
    denoiser = stages._Denoiser(
        stages.velocity_function(model), prefix,
        state=torch.from_numpy(prepared.state)[None],
        mask=torch.from_numpy(prepared.attention_mask)[None])
    x = stages.sample_noise(model, 3)
    dim = prepared.rtc.aligned_norm.shape[1]
    target = torch.zeros_like(x)
    target[0, :, :dim] = torch.from_numpy(prepared.rtc.aligned_norm)
    weights = torch.zeros_like(x)
    weights[0, :, :dim] = torch.from_numpy(prepared.rtc.weights)[:, None]
    t, w = 0.7, 2.5
    got = denoiser.guided(x, t, target=target, weights=weights, weight=w)

    def estimate(inp: torch.Tensor) -> torch.Tensor:
        return inp - t * denoiser.velocity(inp, t)

    with torch.enable_grad():
        x0, vjp = torch.autograd.functional.vjp(estimate, x, v=(target - estimate(x)) * weights)
    v_plain = (x - x0) / t
    torch.testing.assert_close(got, v_plain - w * vjp, rtol=1e-4, atol=1e-5)
    # Every evaluation attends to the prefix alone: the same x gives the same velocity.
    torch.testing.assert_close(denoiser.velocity(x, t), denoiser.velocity(x, t))
