"""The compiled Action loop (issue 16, item 4): same chunks as eager, refused where absent."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from xinfer_ros.core.stages import Stage  # noqa: E402
from xinfer_ros.model.loading import load_stage_model  # noqa: E402
from xinfer_ros.model.pi0 import stages  # noqa: E402
from xinfer_ros.model.synthetic import synthetic_inputs  # noqa: E402

from ..helpers import first_and_rtc  # noqa: E402

pytestmark = pytest.mark.torch

#: torch.compile fuses float32 kernels differently from eager.
TOLERANCE = 1e-5


def test_unknown_and_unavailable_modes_are_refused(pi0_tiny: Any) -> None:
    with pytest.raises(ValueError, match="compile mode must be one of"):
        pi0_tiny.set_compile("fast")
    with pytest.raises(ValueError, match="needs a CUDA device"):
        pi0_tiny.set_compile("cudagraphs")
    assert pi0_tiny.compile_mode == "off"
    with pytest.raises(ValueError, match="no compiled Action loop"):
        load_stage_model("tiny", compile_mode="on")
    from xinfer_ros.engine import make_backend

    with pytest.raises(ValueError, match="max_batch must be at least 1, got 0"):
        make_backend("torch", model="pi0-tiny", compile="on", max_batch=0)


def _prefilled(model: Any, seeds: range, rtc: bool) -> list[Any]:
    out = []
    for seed in seeds:
        inputs = synthetic_inputs(model.io, seed=seed)
        state = model.prepare(inputs.images, "stack the blocks", inputs.state, seed=seed,
                              prev_chunk=inputs.prev_chunk if rtc else None, d=5 if rtc else 0,
                              prev_shift=3 if rtc else 0)
        model.vit(state)
        model.prefill(state)
        out.append(state)
    return out


@pytest.mark.slow
@pytest.mark.extended  # 24-95 s of torch.compile; compile is opt-in ("off" as shipped)
@pytest.mark.timeout(600)
def test_compiled_action_matches_eager_with_and_without_guidance(pi0_tiny: Any) -> None:
    from torch._dynamo.utils import counters

    graphs = counters["stats"]["unique_graphs"]
    for rtc in (False, True):
        states = _prefilled(pi0_tiny, range(3), rtc)
        copies = [pi0_tiny.copy_at(s, Stage.ACTION) for s in states]
        pi0_tiny.run_batch(Stage.ACTION, states[:1])  # eager, batch of one
        pi0_tiny.run_batch(Stage.ACTION, states[1:])  # eager, batch of two
        pi0_tiny.set_compile("on")
        try:
            pi0_tiny.run_batch(Stage.ACTION, copies[:1])
            pi0_tiny.run_batch(Stage.ACTION, copies[1:])
        finally:
            pi0_tiny.set_compile("off")
        for eager, compiled in zip(states, copies, strict=True):
            np.testing.assert_allclose(pi0_tiny.finish(compiled), pi0_tiny.finish(eager),
                                       atol=TOLERANCE, rtol=0)
    assert counters["stats"]["unique_graphs"] > graphs  # compiled, not an eager fallback
    # The compiled step is the same callable for the model: compiled once.
    assert stages.velocity_function(pi0_tiny.module, "on") is stages.velocity_function(
        pi0_tiny.module, "on")


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_backend_compiles_before_serving_and_serves_the_eager_chunks() -> None:
    """Every batch size up to max_batch is compiled before serving, not on its first unit.

    With an Action worker process, lone units still run in this process
    (``inline_idle_action``): it is compiled too, which this process's counters show.
    """
    from torch._dynamo.utils import counters

    from xinfer_ros.engine import make_backend

    eager = make_backend("torch", model="pi0-tiny", device="cpu", threads=1)
    compiled = make_backend("torch", model="pi0-tiny", device="cpu", threads=1, compile="on",
                            max_batch=3, action_processes=1)
    try:
        assert compiled.compile_s > 0 and compiled.describe()["compile"] == "on"
        assert compiled.inline_action_units == 0  # the warm-up's own units are not counted
        graphs = counters["stats"]["unique_graphs"]
        for a, b in zip(first_and_rtc(eager, 2), first_and_rtc(compiled, 2), strict=True):
            np.testing.assert_allclose(b, a, atol=TOLERANCE, rtol=0)
        fresh = compiled.state_factory()
        for size in (3, 2):
            states = [fresh(Stage.ACTION) for _ in range(size)]
            compiled.run_batch(Stage.ACTION, states, None)
            assert all(state.actions is not None for state in states)
        assert compiled.inline_action_units >= 2  # the lone batches ran here
        assert counters["stats"]["unique_graphs"] == graphs  # nothing compiled while serving
    finally:
        compiled.close()
