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

import torch
from torch._ops import OpOverload
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import flop_registry

from xinfer_ros.model.config import VLAConfig
from xinfer_ros.model.loading import load_stage_model
from xinfer_ros.model.request import StagedState
from xinfer_ros.model.serving import ReferenceStageModel, StageModel
from xinfer_ros.model.synthetic import synthetic_inputs
from xinfer_ros.model.vla import ReferenceVLA

__all__ = ["StageFlopCounter", "count_stage_flops", "stage_flops_of"]


class StageFlopCounter(TorchDispatchMode):  # type: ignore[no-untyped-call]
    """Sum the FLOPs of every dispatched op that torch's flop registry knows."""

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.total = 0

    def __torch_dispatch__(
        self,
        func: OpOverload[..., object],
        types: tuple[type, ...],
        args: tuple[object, ...] = (),
        kwargs: dict[str, object] | None = None,
    ) -> object:
        """Run ``func`` and add its FLOPs."""
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        formula = flop_registry.get(func._overloadpacket)
        if formula is not None:
            self.total += int(formula(*args, **kwargs, out_val=out))
        return out


def stage_flops_of(model: StageModel, state: StagedState) -> dict[str, int]:
    """Run the three stages of ``state`` on ``model`` and count each stage's FLOPs."""
    result: dict[str, int] = {}
    for name, fn in (("vit", model.vit), ("prefill", model.prefill), ("action", model.action)):
        counter = StageFlopCounter()
        with counter, torch.no_grad():
            fn(state)
        result[name] = counter.total
    return result


def count_stage_flops(model: str | VLAConfig, rtc: bool = True, d: int = 8,
                      model_path: str | None = None) -> dict[str, int]:
    """FLOPs of one request per stage (meta device, no weights).

    Args:
        model: A preset name or YAML path (any family), or a reference configuration.
        rtc: Count a request with a previous chunk (guided Action: forward + VJP).
        d: Commit length of that request.
        model_path: A π0 checkpoint directory whose configuration replaces the
            preset's shapes (its weights are not read).

    Returns:
        ``{"vit": ..., "prefill": ..., "action": ..., "prefix_len": ...}``.
    """
    if isinstance(model, VLAConfig):
        served: StageModel = ReferenceStageModel(ReferenceVLA.build(model, device="meta"))
    else:
        served = load_stage_model(model, model_path=model_path, device="meta")
    inputs = synthetic_inputs(served.io)
    state = served.prepare(inputs.images, inputs.instruction, inputs.state,
                           prev_chunk=inputs.prev_chunk if rtc else None, d=d if rtc else 0)
    flops = stage_flops_of(served, state)
    flops["prefix_len"] = served.prefix_length(state)
    return flops
