"""Shared builders for the reference-model tests."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from xinfer_ros.model.processing import prepare_request
from xinfer_ros.model.request import RequestState

if TYPE_CHECKING:
    from xinfer_ros.model.synthetic import SyntheticInputs
    from xinfer_ros.model.vla import ReferenceVLA


def request_state(model: ReferenceVLA, inputs: SyntheticInputs, **kwargs: Any) -> RequestState:
    """Prepare ``inputs`` for ``model`` (keyword arguments go to prepare_request)."""
    return RequestState(prepare_request(model.config, model.tokenizer, inputs.images,
                                        inputs.instruction, inputs.state, **kwargs))


def first_and_rtc(backend: Any, robot: int = 3) -> tuple[Any, Any]:
    """A robot's first chunk and its RTC follow-up through a one-slot FIFO engine."""
    from xinfer_ros.engine import EngineConfig, StageEngine

    with StageEngine(backend, "fifo", EngineConfig(slots=(1, 1, 1))) as engine:
        first = engine.submit(backend.example_inputs(robot, None), 5.0, "r").result(60)
        rtc = engine.submit(backend.example_inputs(robot, first.actions), 5.0, "r").result(60)
    assert first.ok and rtc.ok, (first.reason, rtc.reason)
    return first.actions, rtc.actions
