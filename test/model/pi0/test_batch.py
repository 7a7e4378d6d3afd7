"""Batched π0 stages give every request the chunk it gets alone."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from xinfer_ros.core.stages import Stage  # noqa: E402
from xinfer_ros.model.pi0 import stages  # noqa: E402
from xinfer_ros.model.synthetic import synthetic_inputs  # noqa: E402

pytestmark = pytest.mark.torch

#: Float32 kernels of a batch of 4 and of one row may round differently.
TOLERANCE = 1e-4


def _states(model: Any) -> list[Any]:
    """Four requests: two with real-time chunking (different d), two without."""
    out = []
    for i, (d, mode) in enumerate([(0, "soft"), (5, "soft"), (0, "soft"), (3, "hard")]):
        inputs = synthetic_inputs(model.io, seed=i)
        out.append(model.prepare(
            inputs.images, f"task {i}", inputs.state, seed=10 + i, rtc_mode=mode, d=d,
            prev_shift=d, prev_chunk=inputs.prev_chunk if d else None))
    return out


def _alone(model: Any, state: Any) -> np.ndarray:
    model.vit(state)
    model.prefill(state)
    model.action(state)
    return model.finish(state)


def test_batched_stages_match_one_at_a_time(pi0_tiny: Any) -> None:
    alone = [_alone(pi0_tiny, s) for s in _states(pi0_tiny)]
    batch = _states(pi0_tiny)
    assert len({pi0_tiny.batch_key(s) for s in batch}) == 1
    for stage in (Stage.VIT, Stage.PREFILL, Stage.ACTION):
        pi0_tiny.run_batch(stage, batch)
        assert all(s.progress is not stage for s in batch)
    for one, state in zip(alone, batch, strict=True):
        assert state.actions.shape[0] == 1
        np.testing.assert_allclose(pi0_tiny.finish(state), one, atol=TOLERANCE, rtol=0)


def test_mixed_cameras_split_into_batches_of_one_key(pi0_tiny: Any) -> None:
    inputs = synthetic_inputs(pi0_tiny.io, seed=0)
    full = pi0_tiny.prepare(inputs.images, "a", inputs.state, seed=1)
    missing = pi0_tiny.prepare([None, *inputs.images[1:]], "a", inputs.state, seed=1)
    assert pi0_tiny.batch_key(full) != pi0_tiny.batch_key(missing)
    expected = _alone(pi0_tiny, pi0_tiny.prepare([None, *inputs.images[1:]], "a",
                                                 inputs.state, seed=1))
    for stage in (Stage.VIT, Stage.PREFILL, Stage.ACTION):
        pi0_tiny.run_batch(stage, [full, missing])
    np.testing.assert_allclose(pi0_tiny.finish(missing), expected, atol=TOLERANCE, rtol=0)
    with pytest.raises(ValueError, match="same cameras"):
        stages.vit_batch(pi0_tiny.module, [pi0_tiny.prepare(inputs.images, "a", inputs.state),
                                           pi0_tiny.prepare([None, *inputs.images[1:]], "a",
                                                            inputs.state)])
    with pytest.raises(ValueError, match="at least one"):
        stages.action_batch(pi0_tiny.module, [])
