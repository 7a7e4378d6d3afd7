"""The Action loop's caches share the prefix keys and values instead of copying them.

Before issue 27 every denoising step filled a fresh ``DynamicCache`` through ``update``,
a copy of every layer's prefix keys and values per step. Now every step's cache holds
the prefix tensors themselves. The chunks must not change, with or without real-time
chunking, alone or batched, and the shared prefix must come out of the loop untouched
(calibration runs several copies of one prefilled state at once).
"""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")

from transformers import DynamicCache  # noqa: E402

from xinfer_ros.core.stages import Stage  # noqa: E402
from xinfer_ros.model.pi0 import stages  # noqa: E402
from xinfer_ros.model.synthetic import synthetic_inputs  # noqa: E402

pytestmark = pytest.mark.torch


def _copied_cache(prefix_kv: stages.PrefixKV) -> DynamicCache:
    """The former per-step cache: the prefix copied in through ``update``."""
    cache = DynamicCache()
    for index, (keys, values) in enumerate(prefix_kv):
        cache.update(keys, values, index)
    return cache


def _prefilled(model: Any, seed: int, d: int) -> Any:
    """A request after Prefill; with ``d`` > 0 it carries a previous chunk (RTC)."""
    inputs = synthetic_inputs(model.io, seed=seed)
    state = model.prepare(inputs.images, f"task {seed}", inputs.state, seed=20 + seed,
                          d=d, prev_shift=d, prev_chunk=inputs.prev_chunk if d else None)
    model.vit(state)
    model.prefill(state)
    return state


def _actions(model: Any, prefilled: list[Any]) -> list[torch.Tensor]:
    copies = [model.copy_at(s, Stage.ACTION) for s in prefilled]
    model.run_batch(Stage.ACTION, copies)
    return [c.actions for c in copies]


@pytest.mark.parametrize("d", [0, 5], ids=["fresh", "rtc"])
def test_shared_prefix_gives_the_chunks_of_copied_caches(
        pi0_tiny: Any, monkeypatch: pytest.MonkeyPatch, d: int) -> None:
    alone = [_prefilled(pi0_tiny, 0, d)]
    pair = [_prefilled(pi0_tiny, 1, d), _prefilled(pi0_tiny, 2, 0)]
    before = [[(k.clone(), v.clone()) for k, v in s.prefix_kv] for s in alone + pair]
    shared = _actions(pi0_tiny, alone) + _actions(pi0_tiny, pair)
    again = _actions(pi0_tiny, alone)  # a second copy of the same prefilled state
    with monkeypatch.context() as patch:
        patch.setattr(stages, "prefix_cache", _copied_cache)
        copied = _actions(pi0_tiny, alone) + _actions(pi0_tiny, pair)
    assert shared[0].abs().max().item() > 0.1  # a real chunk
    for ours, theirs in zip(shared, copied, strict=True):
        assert torch.equal(ours, theirs)  # bit for bit
    assert torch.equal(again[0], shared[0])
    for state, kv in zip(alone + pair, before, strict=True):
        for (k, v), (k0, v0) in zip(state.prefix_kv, kv, strict=True):
            assert torch.equal(k, k0) and torch.equal(v, v0)



def test_step_cache_is_what_update_builds_but_for_the_copy(pi0_tiny: Any) -> None:
    """A transformers release that gives ``DynamicLayer`` more state fails here first."""
    state = _prefilled(pi0_tiny, 3, 0)
    ours, theirs = stages.prefix_cache(state.prefix_kv), _copied_cache(state.prefix_kv)
    length = int(state.prepared.input_ids.shape[0])
    assert ours.get_seq_length() == theirs.get_seq_length() == length
    assert ours.get_mask_sizes(50, 0) == theirs.get_mask_sizes(50, 0)
    for mine, filled, (keys, _) in zip(ours.layers, theirs.layers, state.prefix_kv,
                                       strict=True):
        assert type(mine) is type(filled) and vars(mine).keys() == vars(filled).keys()
        assert mine.keys is keys  # shared, not copied
