"""The three stages over private request state: shapes, ordering, KV reuse."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import Any

    from xinfer_ros.model.config import VLAConfig
    from xinfer_ros.model.synthetic import SyntheticInputs
    from xinfer_ros.model.vla import ReferenceVLA

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from transformers import DynamicCache  # noqa: E402

from xinfer_ros.core.stages import Stage  # noqa: E402
from xinfer_ros.model import stages  # noqa: E402
from xinfer_ros.model.request import RequestState, StageOrderError  # noqa: E402

from .helpers import request_state  # noqa: E402

pytestmark = pytest.mark.torch


def _request(
    model: ReferenceVLA, inputs: SyntheticInputs, seed: int = 0, **kw: Any
) -> RequestState:
    return request_state(model, inputs, seed=seed, **kw)


class _CallCounter:
    def __init__(self, module: torch.nn.Module) -> None:
        self.calls = 0
        self.handle = module.register_forward_hook(self._hook)

    def _hook(self, *_args: object) -> None:
        self.calls += 1

    def remove(self) -> None:
        self.handle.remove()


def test_vit_gives_217_tokens_batched_per_shape(
    tiny_model: ReferenceVLA, raw_inputs: SyntheticInputs
) -> None:
    req = _request(tiny_model, raw_inputs)
    counter = _CallCounter(tiny_model.vision.siglip)
    try:
        stages.vit(tiny_model, req)
    finally:
        counter.remove()
    # 3 cameras, 2 distinct shapes -> 2 batched SigLIP calls
    assert counter.calls == 2
    assert req.visual_tokens is not None
    assert req.visual_tokens.shape == (1, 217, tiny_model.config.backbone.hidden_size)
    assert torch.isfinite(req.visual_tokens).all()
    assert req.progress is Stage.PREFILL


def test_vit_camera_order_matches_single_camera_runs(
    tiny_model: ReferenceVLA, raw_inputs: SyntheticInputs
) -> None:
    req = _request(tiny_model, raw_inputs)
    stages.vit(tiny_model, req)
    tokens = req.visual_tokens
    groups = req.prepared.pixel_groups
    with torch.no_grad():
        cam2 = tiny_model.vision(torch.from_numpy(groups[1][1][1:2]))
    # camera 2 is the last 70 tokens
    torch.testing.assert_close(tokens[0, 147:], cam2[0], rtol=1e-4, atol=1e-5)


def test_non_square_position_embeddings_are_interpolated(tiny_model: ReferenceVLA) -> None:
    emb = tiny_model.vision.siglip.embeddings
    table = torch.zeros(1, 14 * 22, emb.embed_dim)
    interp = emb.interpolate_pos_encoding(table, 224, 352)
    assert interp.shape == (1, 14 * 22, emb.embed_dim)
    # the corner of the interpolated grid stays close to the trained corner
    square = emb.position_embedding.weight.view(14, 14, -1)
    grid = interp.view(14, 22, -1)
    assert torch.nn.functional.cosine_similarity(grid[0, 0], square[0, 0], dim=0) > 0.8


def test_prefill_returns_dynamic_cache(
    tiny_model: ReferenceVLA, raw_inputs: SyntheticInputs
) -> None:
    req = _request(tiny_model, raw_inputs)
    stages.vit(tiny_model, req)
    stages.prefill(tiny_model, req)
    cfg = tiny_model.config.backbone
    assert isinstance(req.cache, DynamicCache)
    assert len(req.cache.layers) == cfg.num_layers
    expected_len = 217 + len(req.prepared.token_ids)
    assert req.prefix_len == expected_len
    assert req.cache.get_seq_length() == expected_len
    keys = req.cache.layers[0].keys
    assert keys.shape == (1, cfg.num_kv_heads, expected_len, cfg.head_dim)
    assert req.visual_tokens is None  # released after use


def test_stage_order_enforced(tiny_model: ReferenceVLA, raw_inputs: SyntheticInputs) -> None:
    req = _request(tiny_model, raw_inputs)
    with pytest.raises(StageOrderError):
        stages.prefill(tiny_model, req)
    with pytest.raises(StageOrderError):
        stages.action(tiny_model, req)
    stages.vit(tiny_model, req)
    with pytest.raises(StageOrderError):
        stages.vit(tiny_model, req)


@pytest.mark.parametrize("with_rtc", [False, True])
def test_prefix_computed_once_and_reused(
    tiny_model: ReferenceVLA, raw_inputs: SyntheticInputs, with_rtc: bool
) -> None:
    kw = {"prev_chunk": raw_inputs.prev_chunk, "d": 6, "prev_shift": 2} if with_rtc else {}
    req = _request(tiny_model, raw_inputs, **kw)
    backbone = _CallCounter(tiny_model.backbone)
    layer0 = _CallCounter(tiny_model.backbone.layers[0])
    expert = _CallCounter(tiny_model.expert)
    try:
        stages.vit(tiny_model, req)
        stages.prefill(tiny_model, req)
        snapshot = [(lay.keys.clone(), lay.values.clone()) for lay in req.cache.layers]
        stages.action(tiny_model, req)
    finally:
        for c in (backbone, layer0, expert):
            c.remove()
    # the backbone (and each of its layers) runs exactly once per request ...
    assert backbone.calls == 1
    assert layer0.calls == 1
    # ... while the expert runs once per Euler step, reading the same cache
    assert expert.calls == tiny_model.config.action.num_steps
    for (k0, v0), lay in zip(snapshot, req.cache.layers, strict=True):
        assert torch.equal(k0, lay.keys)
        assert torch.equal(v0, lay.values)
    assert req.actions.shape == (1, 16, 14)
    assert torch.isfinite(req.actions).all()
    assert req.progress is None


def test_action_attends_to_prefix_cache(
    tiny_model: ReferenceVLA, raw_inputs: SyntheticInputs
) -> None:
    req_a = _request(tiny_model, raw_inputs, seed=1)
    stages.vit(tiny_model, req_a)
    stages.prefill(tiny_model, req_a)
    req_b = RequestState(req_a.prepared, prefix_len=req_a.prefix_len)
    req_b.progress = Stage.ACTION
    # Same prefix length and noise, perturbed cached values: actions must change.
    req_b.cache = DynamicCache(
        ddp_cache_data=[(lay.keys, lay.values * 2.0) for lay in req_a.cache.layers]
    )
    stages.action(tiny_model, req_a)
    stages.action(tiny_model, req_b)
    assert not torch.allclose(req_a.actions, req_b.actions)


def test_actions_depend_on_observation(
    tiny_model: ReferenceVLA, raw_inputs: SyntheticInputs
) -> None:
    from dataclasses import replace

    out = []
    for state in (np.zeros(14), np.full(14, 0.7)):
        req = _request(tiny_model, replace(raw_inputs, state=state), seed=5)
        out.append(stages.run_request(tiny_model, req))
    assert not torch.allclose(out[0], out[1])


def test_determinism_same_seed_identical(
    tiny_config: VLAConfig, tiny_model: ReferenceVLA, raw_inputs: SyntheticInputs
) -> None:
    from xinfer_ros.model.vla import ReferenceVLA

    kw = {"prev_chunk": raw_inputs.prev_chunk, "d": 8, "prev_shift": 4}
    first = stages.run_request(tiny_model, _request(tiny_model, raw_inputs, seed=11, **kw))
    again = stages.run_request(tiny_model, _request(tiny_model, raw_inputs, seed=11, **kw))
    assert torch.equal(first, again)
    rebuilt = ReferenceVLA.build(tiny_config)  # same weight seed -> same weights
    third = stages.run_request(rebuilt, _request(rebuilt, raw_inputs, seed=11, **kw))
    assert torch.equal(first, third)
    other_noise = stages.run_request(tiny_model, _request(tiny_model, raw_inputs, seed=12, **kw))
    assert not torch.equal(first, other_noise)
    other_weights = ReferenceVLA.build(tiny_config, seed=1)
    fourth = stages.run_request(other_weights, _request(other_weights, raw_inputs, seed=11, **kw))
    assert not torch.equal(first, fourth)


def test_interleaved_requests_do_not_share_state(
    tiny_model: ReferenceVLA, raw_inputs: SyntheticInputs
) -> None:
    solo = stages.run_request(tiny_model, _request(tiny_model, raw_inputs, seed=21))
    a = _request(tiny_model, raw_inputs, seed=21)
    b = _request(tiny_model, raw_inputs, seed=22, prev_chunk=raw_inputs.prev_chunk, d=4)
    stages.vit(tiny_model, a)
    stages.vit(tiny_model, b)
    stages.prefill(tiny_model, b)
    stages.prefill(tiny_model, a)
    stages.action(tiny_model, b)
    stages.action(tiny_model, a)
    assert torch.equal(a.actions, solo)


def test_release_drops_device_state(tiny_model: ReferenceVLA, raw_inputs: SyntheticInputs) -> None:
    req = _request(tiny_model, raw_inputs)
    stages.vit(tiny_model, req)
    stages.prefill(tiny_model, req)
    req.release()
    assert req.cache is None
    with pytest.raises(RuntimeError, match="released"):
        stages.action(tiny_model, req)
