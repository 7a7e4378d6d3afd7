"""Private per-request state carried between the three non-preemptive stages."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from transformers import DynamicCache

from xinfer_ros.core.stages import Stage
from xinfer_ros.model.errors import ModelError
from xinfer_ros.model.processing import PreparedRequest

__all__ = ["RequestState", "StageOrderError", "StagedState", "cache_kv"]


def cache_kv(cache: Any) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Each layer's keys and values of a prefix cache (a ``DynamicCache``)."""
    return [(layer.keys, layer.values) for layer in cache.layers]


class StageOrderError(ModelError, RuntimeError):
    """A stage ran before the stage it depends on (or twice)."""


class StagedState:
    """What every family's request state has: stage ordering, the chunk, release."""

    #: The next stage to run; ``None`` once Action ran.
    progress: Stage | None
    #: The chunk in model units after Action (``(1, H, D)`` float32).
    actions: torch.Tensor | None

    def release(self) -> None:
        """Drop the device tensors once the result is taken."""
        raise NotImplementedError

    @property
    def request_id(self) -> str:
        """The request's id (error messages)."""
        raise NotImplementedError

    def expect(self, stage: Stage) -> None:
        """Raise :class:`StageOrderError` unless ``stage`` is the next one."""
        if self.progress is not stage:
            following = "DONE" if self.progress is None else self.progress.name
            raise StageOrderError(
                f"request {self.request_id!r}: cannot run {stage.name}, "
                f"next stage is {following}"
            )

    def device_inputs(self, stage: Stage) -> list[torch.Tensor]:
        """The device tensors ``stage`` reads that an earlier stage made (lane hand-over)."""
        return []


@dataclasses.dataclass
class RequestState(StagedState):
    """Everything one request owns between stages; no state is shared across requests.

    Attributes:
        prepared: CPU inputs from :func:`~xinfer_ros.model.processing.prepare_request`.
        visual_tokens: ``(1, V, hidden)`` after ViT; released by Prefill.
        cache: Prefix keys/values (transformers ``DynamicCache``) after Prefill.
        prefix_len: Prefix length P (visual + text tokens).
        actions: ``(1, H, D)`` float32 chunk in model units after Action.
        progress: Next stage to run; ``None`` once Action ran.
    """

    prepared: PreparedRequest
    visual_tokens: torch.Tensor | None = None
    cache: DynamicCache | None = None
    prefix_len: int = 0
    actions: torch.Tensor | None = None
    progress: Stage | None = Stage.VIT

    @property
    def request_id(self) -> str:
        """See :attr:`StagedState.request_id`."""
        return self.prepared.request_id

    def release(self) -> None:
        """Drop the device tensors (KV cache, tokens) once the result is taken."""
        self.visual_tokens = None
        self.cache = None

    def device_inputs(self, stage: Stage) -> list[torch.Tensor]:
        """See :meth:`StagedState.device_inputs`: visual tokens, then the prefix K/V."""
        if stage is Stage.PREFILL and self.visual_tokens is not None:
            return [self.visual_tokens]
        if stage is Stage.ACTION and self.cache is not None:
            return [t for kv in cache_kv(self.cache) for t in kv]
        return []
