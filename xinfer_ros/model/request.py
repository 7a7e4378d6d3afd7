"""Private per-request state carried between the three non-preemptive stages."""

from __future__ import annotations

import dataclasses
import enum
from typing import Any

import torch
from transformers import DynamicCache

from xinfer_ros.model.errors import ModelError
from xinfer_ros.model.processing import PreparedRequest

__all__ = ["RequestState", "StageOrderError", "StageProgress", "StagedState", "cache_kv"]


def cache_kv(cache: Any) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Each layer's keys and values of a prefix cache (a ``DynamicCache``)."""
    return [(layer.keys, layer.values) for layer in cache.layers]


class StageOrderError(ModelError, RuntimeError):
    """A stage ran before the stage it depends on (or twice)."""


class StageProgress(enum.IntEnum):
    """Next stage a request needs."""

    VIT = 0
    PREFILL = 1
    ACTION = 2
    DONE = 3


class StagedState:
    """Stage ordering of a request state: needs ``progress`` and ``prepared.request_id``."""

    progress: StageProgress
    prepared: Any

    def expect(self, stage: StageProgress) -> None:
        """Raise :class:`StageOrderError` unless ``stage`` is the next one."""
        if self.progress is not stage:
            raise StageOrderError(
                f"request {self.prepared.request_id!r}: cannot run {stage.name}, "
                f"next stage is {self.progress.name}"
            )

    def device_inputs(self, stage: StageProgress) -> list[torch.Tensor]:
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
        progress: Next stage to run.
    """

    prepared: PreparedRequest
    visual_tokens: torch.Tensor | None = None
    cache: DynamicCache | None = None
    prefix_len: int = 0
    actions: torch.Tensor | None = None
    progress: StageProgress = StageProgress.VIT

    def release(self) -> None:
        """Drop the device tensors (KV cache, tokens) once the result is taken."""
        self.visual_tokens = None
        self.cache = None

    def device_inputs(self, stage: StageProgress) -> list[torch.Tensor]:
        """See :meth:`StagedState.device_inputs`: visual tokens, then the prefix K/V."""
        if stage is StageProgress.PREFILL and self.visual_tokens is not None:
            return [self.visual_tokens]
        if stage is StageProgress.ACTION and self.cache is not None:
            return [t for kv in cache_kv(self.cache) for t in kv]
        return []
