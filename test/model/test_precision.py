"""bfloat16 parameters with a float32 flow: chunks agree with float32 within a bound.

Both families keep the flow state, the guidance arithmetic and the time embedding in
float32 and run only the networks in the parameters' dtype (for a GPU in bfloat16). On
this CPU the same seeded weights, rounded to bfloat16, must give the float32 chunk
within the bound below, with and without RTC guidance.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from xinfer_ros.model.loading import load_stage_model  # noqa: E402
from xinfer_ros.model.synthetic import synthetic_inputs  # noqa: E402

pytestmark = pytest.mark.torch

#: Largest difference allowed between the bfloat16 and the float32 chunk, relative to
#: the float32 chunk's largest magnitude (bfloat16 keeps 8 significant bits: one
#: rounding is at most 0.4 %).
RELATIVE_BOUND = 0.05


def _chunk(model: Any, inputs: Any, prev: Any) -> tuple[np.ndarray, Any]:
    state = model.prepare(inputs.images, "stack the blocks", inputs.state, prev_chunk=prev,
                          d=5 if prev is not None else 0, seed=4)
    model.vit(state)
    model.prefill(state)
    model.action(state)
    flow_dtype = state.actions.dtype
    return model.finish(state), flow_dtype


@pytest.mark.parametrize("preset", ["pi0-tiny", "tiny"])
def test_bfloat16_chunks_agree_with_float32(preset: str) -> None:
    torch.set_num_threads(1)
    full = load_stage_model(preset)
    half = load_stage_model(preset, dtype="bfloat16")
    assert full.dtype == torch.float32 and half.dtype == torch.bfloat16
    inputs = synthetic_inputs(full.io, seed=3)
    for prev in (None, inputs.prev_chunk):  # plain and RTC-guided sampling
        (want, want_dtype), (got, got_dtype) = (_chunk(m, inputs, prev) for m in (full, half))
        assert want_dtype == got_dtype == torch.float32  # the flow state stayed float32
        scale = float(np.max(np.abs(want)))
        error = float(np.max(np.abs(got - want)))
        assert 0.0 < error <= RELATIVE_BOUND * scale, (preset, prev is None, error, scale)
