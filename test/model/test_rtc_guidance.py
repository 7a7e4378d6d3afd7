"""Real-time chunking inside the action stage: frozen prefix and guidance."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from xinfer_ros.model.synthetic import SyntheticInputs
    from xinfer_ros.model.vla import ReferenceVLA

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from xinfer_ros.model import stages  # noqa: E402
from xinfer_ros.model.processing import postprocess_actions  # noqa: E402
from xinfer_ros.model.request import RequestState  # noqa: E402

from .helpers import request_state  # noqa: E402

pytestmark = pytest.mark.torch

D_COMMIT, SHIFT = 4, 2


def _prefilled(model: ReferenceVLA, inputs: SyntheticInputs, seed: int, mode: str) -> RequestState:
    req = request_state(model, inputs, prev_chunk=inputs.prev_chunk, d=D_COMMIT,
                        prev_shift=SHIFT, rtc_mode=mode, seed=seed)
    stages.vit(model, req)
    stages.prefill(model, req)
    return req


def _fork(req: RequestState) -> RequestState:
    twin = RequestState(req.prepared, cache=req.cache, prefix_len=req.prefix_len)
    twin.progress = req.progress
    return twin


def _masked_error(actions: torch.Tensor, req: RequestState) -> float:
    rtc = req.prepared.rtc
    target = torch.from_numpy(rtc.aligned_norm)
    w = torch.from_numpy(rtc.weights)[:, None]
    # only the guided (not frozen) part of the overlap counts
    diff = (actions[0] - target)[rtc.frozen :] * w[rtc.frozen :]
    return float((diff**2).sum())


def test_guidance_reduces_masked_error(
    tiny_model: ReferenceVLA, raw_inputs: SyntheticInputs
) -> None:
    guided_err, free_err = [], []
    for seed in range(3):
        req = _prefilled(tiny_model, raw_inputs, seed, "soft")
        unguided = _fork(req)
        stages.action(tiny_model, req, guidance=True)
        stages.action(tiny_model, unguided, guidance=False)
        guided_err.append(_masked_error(req.actions, req))
        free_err.append(_masked_error(unguided.actions, req))
    for g, f in zip(guided_err, free_err, strict=True):
        assert g < f
    assert np.mean(guided_err) < 0.2 * np.mean(free_err)


def test_guidance_error_shrinks_with_beta(
    tiny_model: ReferenceVLA, raw_inputs: SyntheticInputs
) -> None:
    errs = []
    for beta in (0.0, 5.0):
        req = request_state(tiny_model, raw_inputs, prev_chunk=raw_inputs.prev_chunk,
                            d=D_COMMIT, prev_shift=SHIFT, beta=beta, seed=7)
        errs.append(_masked_error(stages.run_request(tiny_model, req), req))
    assert errs[1] < errs[0]


@pytest.mark.parametrize("mode", ["hard", "soft"])
def test_frozen_prefix_exact(
    tiny_model: ReferenceVLA, raw_inputs: SyntheticInputs, mode: str
) -> None:
    req = _prefilled(tiny_model, raw_inputs, 0, mode)
    stages.action(tiny_model, req)
    rtc = req.prepared.rtc
    # exact in model units ...
    assert torch.equal(req.actions[0, :D_COMMIT], torch.from_numpy(rtc.aligned_norm[:D_COMMIT]))
    # ... and bit-for-bit in robot units after output processing
    chunk = postprocess_actions(req.actions, tiny_model.config, rtc)
    np.testing.assert_array_equal(chunk[:D_COMMIT], raw_inputs.prev_chunk[SHIFT : SHIFT + D_COMMIT])
    assert not np.allclose(chunk[D_COMMIT:], 0.0)


def test_hard_mode_guides_only_the_frozen_keyframes(
    tiny_model: ReferenceVLA, raw_inputs: SyntheticInputs
) -> None:
    hard = _prefilled(tiny_model, raw_inputs, 0, "hard")
    soft = _fork(_prefilled(tiny_model, raw_inputs, 0, "soft"))
    assert float(hard.prepared.rtc.weights[D_COMMIT:].sum()) == 0.0
    assert float(soft.prepared.rtc.weights[D_COMMIT:].sum()) > 0.0
    stages.action(tiny_model, hard)
    stages.action(tiny_model, soft)
    # soft guidance pulls the rest of the overlap closer than hard masking does
    assert _masked_error(soft.actions, soft) < _masked_error(hard.actions, soft)


def test_guided_velocity_matches_explicit_vjp(
    tiny_model: ReferenceVLA, raw_inputs: SyntheticInputs
) -> None:
    req = _prefilled(tiny_model, raw_inputs, 0, "soft")
    expert = tiny_model.expert
    prefix_kv = [(lay.keys, lay.values) for lay in req.cache.layers]
    positions = torch.arange(16)[None, :] + req.prefix_len
    x = stages.sample_noise(tiny_model, 3)
    rope = expert.rope(positions, like=x)
    target = torch.from_numpy(req.prepared.rtc.aligned_norm)[None]
    mask = torch.from_numpy(req.prepared.rtc.weights).view(1, -1, 1)
    tau, weight = 0.3, 2.5
    got = stages.guided_velocity(
        expert, x, tau, prefix_kv=prefix_kv, rope=rope, target=target, mask=mask, weight=weight
    )

    def denoise(inp: torch.Tensor) -> torch.Tensor:
        v = expert(inp, torch.full((1,), tau), prefix_kv, rope)
        return inp + (1 - tau) * v

    with torch.enable_grad():
        x1, vjp = torch.autograd.functional.vjp(denoise, x, v=(target - denoise(x)) * mask)
    v_plain = (x1 - x) / (1 - tau)
    torch.testing.assert_close(got, v_plain + weight * vjp, rtol=1e-4, atol=1e-5)
