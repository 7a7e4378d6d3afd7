"""FLOPs per stage, counted with the formulas of ``torch.utils.flop_counter``.

The model is built on the ``meta`` device, so counting works for the 2B presets
without allocating weights. Counted: matmuls, convolutions and attention (forward and,
for RTC guidance, the backward of the vector-Jacobian product); element-wise ops are
not counted (they are a few percent and memory-bound).

``FlopCounterMode`` itself is not used: its module tracker installs backward hooks
that ``torch.autograd.grad`` (used by RTC guidance) rejects. :class:`StageFlopCounter`
is a minimal dispatch mode over the same formula registry, without module tracking.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import flop_registry

from xinfer_ros.model import stages
from xinfer_ros.model.config import VLAConfig
from xinfer_ros.model.processing import prepare_request
from xinfer_ros.model.request import RequestState
from xinfer_ros.model.synthetic import synthetic_inputs
from xinfer_ros.model.vla import ReferenceVLA

__all__ = ["StageFlopCounter", "count_stage_flops", "stage_flops_of"]


class StageFlopCounter(TorchDispatchMode):
    """Sum the FLOPs of every dispatched op that torch's flop registry knows."""

    def __init__(self) -> None:
        super().__init__()
        self.total = 0

    def __torch_dispatch__(
        self,
        func: Any,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        """Run ``func`` and add its FLOPs."""
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        formula = flop_registry.get(func._overloadpacket)
        if formula is not None:
            self.total += int(formula(*args, **kwargs, out_val=out))
        return out


def stage_flops_of(model: ReferenceVLA, req: RequestState) -> dict[str, int]:
    """Run the three stages of ``req`` on ``model`` and count each stage's FLOPs."""
    result: dict[str, int] = {}
    for name, fn in (("vit", stages.vit), ("prefill", stages.prefill), ("action", stages.action)):
        counter = StageFlopCounter()
        with counter:
            fn(model, req)
        result[name] = counter.total
    return result


def count_stage_flops(config: VLAConfig, rtc: bool = True, d: int = 8) -> dict[str, int]:
    """FLOPs of one request per stage for ``config`` (meta device, no weights).

    Args:
        config: Model configuration.
        rtc: Count a request with a previous chunk (guided Action: forward + VJP).
        d: Commit length of that request.

    Returns:
        ``{"vit": ..., "prefill": ..., "action": ..., "prefix_len": ...}``.
    """
    model = ReferenceVLA.build(config, device="meta")
    inputs = synthetic_inputs(config)
    prepared = prepare_request(
        config,
        model.tokenizer,
        inputs.images,
        inputs.instruction,
        inputs.state,
        prev_chunk=inputs.prev_chunk if rtc else None,
        d=d if rtc else 0,
    )
    req = RequestState(prepared)
    with torch.no_grad():
        flops = stage_flops_of(model, req)
    flops["prefix_len"] = req.prefix_len
    return flops
