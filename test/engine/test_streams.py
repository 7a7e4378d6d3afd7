"""Lane streams (issue 16, item 2): what crosses lanes is handed over and finished."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from xinfer_ros.core.stages import Stage  # noqa: E402
from xinfer_ros.engine import make_backend  # noqa: E402
from xinfer_ros.engine.backends.streams import (  # noqa: E402
    CpuStreams,
    CudaStreams,
    LaneStreams,
    make_streams,
)
from xinfer_ros.engine.lanes import LaneInfo  # noqa: E402
from xinfer_ros.model.transfer import to_device  # noqa: E402

pytestmark = pytest.mark.torch


class _Recorder(LaneStreams):
    """Streams that log what the backend asks of them, in order."""

    def __init__(self) -> None:
        self.log: list[tuple[str, Any]] = []

    def create(self) -> Any:
        self.log.append(("create", None))
        return "stream-1"

    @contextlib.contextmanager
    def running_on(self, stream: Any) -> Iterator[None]:
        self.log.append(("enter", stream))
        yield
        self.log.append(("exit", stream))

    def hand_over(self, tensors: Any, stream: Any) -> None:
        self.log.append(("hand_over", (stream, [id(t) for t in tensors])))

    def finish(self, stream: Any) -> None:
        self.log.append(("finish", stream))

    def settle(self) -> None:
        self.log.append(("settle", None))


@pytest.mark.parametrize("model", ["pi0-tiny", "tiny"])
def test_each_unit_hands_over_what_earlier_stages_made_and_finishes(model: str) -> None:
    backend = make_backend("torch", model=model, device="cpu", threads=1)
    recorder = _Recorder()
    backend._streams = recorder
    lane = LaneInfo("context", 0)
    backend.lane_setup(lane)
    assert lane.stream == "stream-1"
    state = backend.prepare(backend.example_inputs(0, None), 0, "r")
    expected = {Stage.VIT: []}
    backend.run_stage(Stage.VIT, state, lane)
    expected[Stage.PREFILL] = [id(t) for t in state.device_inputs(Stage.PREFILL)]
    backend.run_stage(Stage.PREFILL, state, lane)
    expected[Stage.ACTION] = [id(t) for t in state.device_inputs(Stage.ACTION)]
    backend.run_stage(Stage.ACTION, state, lane)
    assert expected[Stage.PREFILL] and expected[Stage.ACTION]  # something crossed lanes
    units = [e for e in recorder.log if e[0] != "create"]
    assert units == [entry for s in (Stage.VIT, Stage.PREFILL, Stage.ACTION) for entry in (
        ("hand_over", ("stream-1", expected[s])), ("enter", "stream-1"),
        ("exit", "stream-1"), ("finish", "stream-1"))]
    recorder.log.clear()
    backend.state_factory()
    assert recorder.log == [("settle", None)]  # the shared warm-up prefix is finished


def test_cpu_has_no_streams_and_cuda_selects_its_device() -> None:
    cpu = make_streams("cpu")
    assert isinstance(cpu, CpuStreams) and cpu.create() is None
    with cpu.running_on(None):
        cpu.hand_over([torch.ones(1)], None)
        cpu.finish(None)
    assert CudaStreams(torch.device("cuda:1")).index == 1  # no CUDA call needed for this


def test_inputs_reach_the_device_as_given() -> None:
    array = np.arange(6, dtype=np.float32).reshape(2, 3)[:, ::2]  # not contiguous
    tensor = to_device(array, torch.device("cpu"), torch.float64)
    assert tensor.dtype == torch.float64 and tensor.tolist() == [[0.0, 2.0], [3.0, 5.0]]
