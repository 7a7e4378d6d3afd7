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
