"""One interface over every served model: prepare, three stages, finish.

The engine's torch backend serves a :class:`StageModel`;
:func:`~xinfer_ros.model.loading.load_stage_model` builds the one of a preset's family
(each family's entry in :data:`~xinfer_ros.model.presets.FAMILY_REGISTRY`):

* :class:`ReferenceStageModel`: the paper-shaped reference VLA (``tiny``, ``vla-2b``,
  ``pi05``), :mod:`xinfer_ros.model.stages`;
* :class:`Pi0StageModel`: transformers' π0 (``pi0``, ``pi0-tiny``, a checkpoint
  directory), :mod:`xinfer_ros.model.pi0.stages`.

Per request::

    state = model.prepare(images, instruction, state, prev_chunk=..., d=..., seed=...)  # CPU
    model.vit(state); model.prefill(state); model.action(state)                        # device
    chunk = model.finish(state)          # CPU: (H, D) float64 in robot units
    model.release(state)

For Action units in worker processes (CPU), :meth:`StageModel.action_payload` packs
what the Action stage reads (prefix keys and values as arrays, the CPU inputs) and
:meth:`StageModel.action_state` rebuilds it in the worker's own copy of the model.
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from collections.abc import Hashable, Sequence
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import torch

from xinfer_ros.core.stages import Stage
from xinfer_ros.model.io import ModelIO, reference_io
from xinfer_ros.model.request import RequestState, StagedState, cache_kv
from xinfer_ros.model.transfer import to_device

if TYPE_CHECKING:
    from transformers import PI0ForConditionalGeneration

    from xinfer_ros.model.pi0.processing import Pi0Prepared, Pi0Processor
    from xinfer_ros.model.pi0.stages import Pi0State
    from xinfer_ros.model.processing import PreparedRequest
    from xinfer_ros.model.vla import ReferenceVLA

__all__ = ["Pi0StageModel", "ReferenceStageModel", "StageModel"]

#: Per layer, the prefix keys and values as CPU arrays (an Action payload).
KVArrays = list[tuple[np.ndarray, np.ndarray]]
#: What the reference Action reads: its CPU inputs, the prefix and its length.
_ReferencePayload = tuple["PreparedRequest", KVArrays, int]
#: What the π0 Action reads: its CPU inputs and the prefix.
_Pi0Payload = tuple["Pi0Prepared", KVArrays]


class StageModel(ABC):
    """A model split into ViT, Prefill and Action over private per-request state.

    Each family's methods take the states its own :meth:`prepare` made.

    Attributes:
        io: What the model takes and returns.
        module: The ``torch.nn.Module`` holding the weights (read-only while serving).
    """

    io: ModelIO
    #: Whether :meth:`run_batch` stacks states of one :meth:`batch_key` into one forward.
    batches: bool = False
    #: How the Action loop runs (:meth:`set_compile`): ``off`` is eager.
    compile_mode: str = "off"
    module: torch.nn.Module

    @property
    def device(self) -> torch.device:
        """Device of the weights."""
        return next(self.module.parameters()).device

    @property
    def dtype(self) -> torch.dtype:
        """Dtype of the weights."""
        return next(self.module.parameters()).dtype

    @abstractmethod
    def prepare(self, images: Sequence[Any], instruction: str, state: Any, *,
                prev_chunk: Any = None, d: int = 0, prev_shift: int = 0,
                rtc_mode: str = "soft", seed: int = 0, request_id: str = "",
                prev_dims: int | None = None) -> StagedState:
        """Validate and convert one request on the CPU.

        Raises:
            InputError: A subclass naming the malformed field.
        """

    @abstractmethod
    def vit(self, state: StagedState) -> None:
        """Run the ViT stage of ``state``."""

    @abstractmethod
    def prefill(self, state: StagedState) -> None:
        """Run the Prefill stage of ``state``."""

    @abstractmethod
    def action(self, state: StagedState, guidance: bool = True) -> None:
        """Run the Action stage of ``state`` (RTC guidance when it has a previous chunk)."""

    def set_compile(self, mode: str) -> None:
        """Run the Action loop eagerly (``off``) or compiled (``on``, ``cudagraphs``).

        Compilation happens on the next Action unit of each shape (a caller warms up).

        Raises:
            ValueError: on an unknown mode, or a family without a compiled loop.
        """
        if mode != "off":
            raise ValueError(f"{self.io.name}: no compiled Action loop (the π0 family has "
                             f"one); compile mode must be 'off', got {mode!r}")
        self.compile_mode = mode

    def batch_key(self, state: StagedState) -> Hashable | None:
        """States of equal keys run a stage as one batch (:meth:`run_batch`).

        None: this family runs one state at a time.
        """
        return None

    def run_batch(self, stage: Stage, states: Sequence[StagedState],
                  guidance: bool = True) -> None:
        """Run ``stage`` of every state, which are all ready for it.

        Families with a :meth:`batch_key` stack states of one key into one forward;
        the results equal one-at-a-time runs up to the kernels' rounding.
        """
        for state in states:
            if stage is Stage.VIT:
                self.vit(state)
            elif stage is Stage.PREFILL:
                self.prefill(state)
            else:
                self.action(state, guidance=guidance)

    @abstractmethod
    def finish(self, state: StagedState) -> np.ndarray:
        """CPU output processing: the ``(H, D)`` chunk in robot units."""

    def release(self, state: StagedState) -> None:
        """Drop the device tensors ``state`` holds."""
        state.release()
        state.actions = None

    @abstractmethod
    def copy_at(self, state: StagedState, stage: Stage) -> StagedState:
        """A fresh state that runs ``stage`` next from what ``state`` holds (calibration).

        ``state`` must be ready for ``stage``; the copy shares its read-only tensors,
        so several copies may run at once.
        """

    @abstractmethod
    def action_payload(self, state: StagedState) -> object:
        """What the Action stage of ``state`` reads, as picklable CPU data."""

    @abstractmethod
    def action_state(self, payload: object) -> StagedState:
        """A state ready for Action, from :meth:`action_payload`'s output."""

    @abstractmethod
    def num_parameters_by_stage(self) -> dict[str, int]:
        """Parameter count of the modules each stage runs."""

    @abstractmethod
    def prefix_length(self, state: StagedState) -> int:
        """Prefix tokens (visual and text) of a state after Prefill."""


def _kv_arrays(layers: Sequence[tuple[torch.Tensor, torch.Tensor]]) -> KVArrays:
    return [(k.detach().cpu().numpy(), v.detach().cpu().numpy()) for k, v in layers]


def _count(*modules: torch.nn.Module) -> int:
    return sum(p.numel() for module in modules for p in module.parameters())


def _reference(state: StagedState) -> RequestState:
    if not isinstance(state, RequestState):
        raise TypeError(f"the reference model runs its own states, not {type(state).__name__}")
    return state


class ReferenceStageModel(StageModel):
    """The reference VLA (``xinfer_ros.model.vla``) behind :class:`StageModel`."""

    module: ReferenceVLA

    def __init__(self, model: ReferenceVLA) -> None:
        self.module = model
        self.io = reference_io(model.config)

    def prepare(self, images: Sequence[Any], instruction: str, state: Any, *,
                prev_chunk: Any = None, d: int = 0, prev_shift: int = 0,
                rtc_mode: str = "soft", seed: int = 0, request_id: str = "",
                prev_dims: int | None = None) -> StagedState:
        """See :meth:`StageModel.prepare` (every camera required, aspect ratio kept)."""
        from xinfer_ros.model.processing import prepare_request

        prepared = prepare_request(
            self.module.config, self.module.tokenizer, images, instruction, state,
            prev_chunk=prev_chunk, d=d, prev_shift=prev_shift, rtc_mode=rtc_mode, seed=seed,
            request_id=request_id, prev_dims=prev_dims)
        return RequestState(prepared)

    def vit(self, state: StagedState) -> None:
        """See :meth:`StageModel.vit`."""
        from xinfer_ros.model import stages

        stages.vit(self.module, _reference(state))

    def prefill(self, state: StagedState) -> None:
        """See :meth:`StageModel.prefill`."""
        from xinfer_ros.model import stages

        stages.prefill(self.module, _reference(state))

    def action(self, state: StagedState, guidance: bool = True) -> None:
        """See :meth:`StageModel.action`."""
        from xinfer_ros.model import stages

        stages.action(self.module, _reference(state), guidance=guidance)

    def finish(self, state: StagedState) -> np.ndarray:
        """See :meth:`StageModel.finish`."""
        from xinfer_ros.model.processing import postprocess_actions

        own = _reference(state)
        return postprocess_actions(own.actions, self.module.config, own.prepared.rtc)

    def copy_at(self, state: StagedState, stage: Stage) -> StagedState:
        """See :meth:`StageModel.copy_at` (the reference Action only reads the cache)."""
        own = _reference(state)
        if stage is Stage.VIT:
            return RequestState(own.prepared)
        return dataclasses.replace(own, progress=stage, actions=None)

    def action_payload(self, state: StagedState) -> _ReferencePayload:
        """See :meth:`StageModel.action_payload`."""
        own = _reference(state)
        if own.cache is None:
            raise RuntimeError("prefix cache was released before action")
        kv = _kv_arrays(cache_kv(own.cache))
        return dataclasses.replace(own.prepared, pixel_groups=()), kv, own.prefix_len

    def action_state(self, payload: object) -> StagedState:
        """See :meth:`StageModel.action_state`."""
        prepared, kv, prefix_len = cast(_ReferencePayload, payload)
        cache = _PrefixCache([_LayerKV(torch.from_numpy(k), torch.from_numpy(v))
                              for k, v in kv])
        return RequestState(prepared, cache=cache, prefix_len=prefix_len,  # type: ignore[arg-type]
                            progress=Stage.ACTION)

    def num_parameters_by_stage(self) -> dict[str, int]:
        """See :meth:`StageModel.num_parameters_by_stage`."""
        return dict(self.module.num_parameters_by_stage())

    def prefix_length(self, state: StagedState) -> int:
        """See :meth:`StageModel.prefix_length`."""
        return int(_reference(state).prefix_len)


@dataclasses.dataclass
class _LayerKV:
    """One layer's cached prefix keys and values (what the reference Action reads)."""

    keys: torch.Tensor
    values: torch.Tensor


@dataclasses.dataclass
class _PrefixCache:
    """Stand-in for ``DynamicCache`` for the reference Action: ``layers[i].keys/values``."""

    layers: list[_LayerKV]


def _pi0(state: StagedState) -> Pi0State:
    from xinfer_ros.model.pi0.stages import Pi0State

    if not isinstance(state, Pi0State):
        raise TypeError(f"the π0 model runs its own states, not {type(state).__name__}")
    return state


class Pi0StageModel(StageModel):
    """transformers' π0 (:mod:`xinfer_ros.model.pi0`) behind :class:`StageModel`.

    Args:
        model: The ``PI0ForConditionalGeneration``.
        processor: CPU preparation and output processing of its resolved spec.
    """

    batches = True
    module: PI0ForConditionalGeneration

    def __init__(self, model: PI0ForConditionalGeneration, processor: Pi0Processor) -> None:
        self.module = model
        self.processor = processor
        self.spec = processor.spec
        self.io = self.spec.io()

    def prepare(self, images: Sequence[Any], instruction: str, state: Any, *,
                prev_chunk: Any = None, d: int = 0, prev_shift: int = 0,
                rtc_mode: str = "soft", seed: int = 0, request_id: str = "",
                prev_dims: int | None = None) -> StagedState:
        """See :meth:`StageModel.prepare` (missing cameras masked, any image size)."""
        from xinfer_ros.model.pi0.processing import Pi0Inputs
        from xinfer_ros.model.pi0.stages import Pi0State

        prepared = self.processor.prepare(
            Pi0Inputs(images, instruction, state), prev_chunk=prev_chunk, d=d,
            prev_shift=prev_shift, rtc_mode=rtc_mode, seed=seed, request_id=request_id,
            prev_dims=prev_dims)
        return Pi0State(prepared)

    def vit(self, state: StagedState) -> None:
        """See :meth:`StageModel.vit`."""
        from xinfer_ros.model.pi0 import stages

        stages.vit(self.module, _pi0(state))

    def prefill(self, state: StagedState) -> None:
        """See :meth:`StageModel.prefill`."""
        from xinfer_ros.model.pi0 import stages

        stages.prefill(self.module, _pi0(state))

    def finish(self, state: StagedState) -> np.ndarray:
        """See :meth:`StageModel.finish`."""
        own = _pi0(state)
        prepared = own.prepared
        return self.processor.postprocess(own.actions, prepared.rtc, prepared.action_offset)

    def set_compile(self, mode: str) -> None:
        """See :meth:`StageModel.set_compile` (``torch.compile`` of the expert step)."""
        from xinfer_ros.model.pi0 import stages

        stages.velocity_function(self.module, mode)  # validates, compiles lazily
        self.compile_mode = mode

    def action(self, state: StagedState, guidance: bool = True) -> None:
        """See :meth:`StageModel.action`, in the model's compile mode."""
        from xinfer_ros.model.pi0 import stages

        stages.action(self.module, _pi0(state), guidance, self.compile_mode)

    def batch_key(self, state: StagedState) -> Hashable | None:
        """See :meth:`StageModel.batch_key`: present cameras and prompt length."""
        from xinfer_ros.model.pi0 import stages

        return stages.batch_key(_pi0(state))

    def run_batch(self, stage: Stage, states: Sequence[StagedState],
                  guidance: bool = True) -> None:
        """See :meth:`StageModel.run_batch`; states of one key run as one batch."""
        from xinfer_ros.model.pi0 import stages

        groups: dict[Hashable, list[Pi0State]] = {}
        for state in states:
            own = _pi0(state)
            groups.setdefault(stages.batch_key(own), []).append(own)
        for group in groups.values():
            if stage is Stage.VIT:
                stages.vit_batch(self.module, group)
            elif stage is Stage.PREFILL:
                stages.prefill_batch(self.module, group)
            else:
                stages.action_batch(self.module, group, guidance, self.compile_mode)

    def _state_with_prefix(self, prepared: Pi0Prepared,
                           kv: Sequence[tuple[torch.Tensor, torch.Tensor]]) -> Pi0State:
        from xinfer_ros.model.pi0.stages import Pi0State

        return Pi0State(prepared, prefix_kv=list(kv), progress=Stage.ACTION)

    def copy_at(self, state: StagedState, stage: Stage) -> StagedState:
        """See :meth:`StageModel.copy_at`."""
        from xinfer_ros.model.pi0.stages import Pi0State

        own = _pi0(state)
        if stage is Stage.VIT:
            return Pi0State(own.prepared)
        if stage is Stage.PREFILL:
            return dataclasses.replace(own, progress=stage, actions=None)
        if own.prefix_kv is None:
            raise RuntimeError("prefix cache was released before action")
        return self._state_with_prefix(own.prepared, own.prefix_kv)

    def action_payload(self, state: StagedState) -> _Pi0Payload:
        """See :meth:`StageModel.action_payload`."""
        own = _pi0(state)
        if own.prefix_kv is None:
            raise RuntimeError("prefix cache was released before action")
        prepared = dataclasses.replace(own.prepared, pixels=np.zeros((0,), np.float32))
        return prepared, _kv_arrays(own.prefix_kv)

    def action_state(self, payload: object) -> StagedState:
        """See :meth:`StageModel.action_state`."""
        prepared, kv = cast(_Pi0Payload, payload)
        tensors = [(to_device(k, self.device), to_device(v, self.device)) for k, v in kv]
        return self._state_with_prefix(prepared, tensors)

    def prefix_length(self, state: StagedState) -> int:
        """See :meth:`StageModel.prefix_length` (prompt padding included)."""
        return int(_pi0(state).prepared.input_ids.shape[0])

    def num_parameters_by_stage(self) -> dict[str, int]:
        """Parameters per stage.

        ViT: vision tower, projector and token embeddings; Prefill: the language model;
        Action: the expert and the action/time projections. The expert's own token
        embedding (present in the checkpoint, never run: its inputs are embeddings)
        is not counted.
        """
        vlm, dit = self.module.model.vlm, self.module.model.dit
        embeddings = vlm.get_input_embeddings()
        prefix = _count(vlm.vision_tower, vlm.multi_modal_projector, embeddings)
        return {"vit": prefix,
                "prefill": _count(vlm.language_model) - _count(embeddings),
                "action": _count(dit, self.module.embed_action_time,
                                 self.module.action_out_proj)
                - _count(dit.get_input_embeddings())}
