"""transformers' π0 split into the engine's three non-preemptive stages.

``PI0ForConditionalGeneration.sample_actions`` runs, in one call: the prefix embedding
(SigLIP, projector, token embeddings), the PaliGemma language model over the prefix
with a cache, and K Euler steps of the Gemma action expert over that cache, cropping
it back to the prefix after every step. The stages below run the same modules in the
same order on one request's private state, so that an engine can schedule each part
on its own; without real-time chunking the result equals ``sample_actions`` on the
same tensors (:mod:`xinfer_ros.model.pi0.parity`).

Time runs as in transformers: ``t = 1`` is noise, ``t = 0`` is data, the step is
``x ← x + dt · v`` with ``dt = −1/K`` and ``v ≈ noise − data``.

Real-time chunking (Black, Galliker, Levine 2025) in this convention: with the
one-step estimate of the data ``x̂ = x − t · v(x)``, the guided velocity is
``v − w · (∂x̂/∂x)ᵀ [W ⊙ (Y − x̂)]`` (the sign flips against the τ = 1 − t convention
of :mod:`xinfer_ros.rtc.masks`, whose weights ``w(τ)`` are used at ``τ = 1 − t``).
``W`` is the soft or hard mask over keyframes on the robot's action dimensions and
``Y`` the aligned previous chunk in model units; the vector-Jacobian product is taken
through the action expert with ``torch.autograd.grad``. The first ``d`` keyframes
follow the straight path from their own noise to ``Y`` and end on it exactly.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable

import numpy as np
import torch
from transformers import DynamicCache, PI0Config, PI0ForConditionalGeneration
from transformers.cache_utils import DynamicLayer

from xinfer_ros.core.stages import Stage
from xinfer_ros.model.io import COMPILE_MODES
from xinfer_ros.model.pi0.processing import Pi0Prepared
from xinfer_ros.model.request import StagedState, StageOrderError, cache_kv
from xinfer_ros.model.transfer import to_device

__all__ = ["ModelInputs", "Pi0State", "action", "action_batch", "batch_key",
           "expert_velocity", "model_inputs", "prefill", "prefill_batch", "prefix_cache",
           "run_request", "sample_noise", "velocity_function", "vit", "vit_batch"]

#: A layer's cached prefix keys and values.
PrefixKV = list[tuple[torch.Tensor, torch.Tensor]]


@dataclasses.dataclass
class Pi0State(StagedState):
    """Everything one π0 request owns between stages.

    Attributes:
        prepared: CPU inputs.
        prefix_embeds: ``(1, L, hidden)`` after ViT; released by Prefill.
        prefix_kv: Each layer's prefix keys and values after Prefill (every denoising
            step attends to them through a cache of its own).
        actions: ``(1, H, max_action_dim)`` float32 in model units, after Action.
        progress: Next stage to run; ``None`` once Action ran.
    """

    prepared: Pi0Prepared
    prefix_embeds: torch.Tensor | None = None
    prefix_kv: PrefixKV | None = None
    actions: torch.Tensor | None = None
    progress: Stage | None = Stage.VIT

    @property
    def request_id(self) -> str:
        """See :attr:`StagedState.request_id`."""
        return self.prepared.request_id

    def release(self) -> None:
        """Drop the device tensors once the result is taken."""
        self.prefix_embeds = None
        self.prefix_kv = None

    def device_inputs(self, stage: Stage) -> list[torch.Tensor]:
        """The device tensors ``stage`` reads that an earlier stage made."""
        if stage is Stage.PREFILL and self.prefix_embeds is not None:
            return [self.prefix_embeds]
        if stage is Stage.ACTION and self.prefix_kv is not None:
            return [t for kv in self.prefix_kv for t in kv]
        return []


@dataclasses.dataclass(frozen=True)
class ModelInputs:
    """One request's tensors on the model's device, as ``sample_actions`` takes them."""

    input_ids: torch.Tensor
    pixel_values: torch.Tensor
    pixel_attention_mask: torch.Tensor
    attention_mask: torch.Tensor
    state: torch.Tensor


def model_inputs(model: PI0ForConditionalGeneration, prepared: Pi0Prepared) -> ModelInputs:
    """Batch-of-one tensors of a prepared request on the model's device and dtype.

    Only the present cameras' pixels are passed, all marked present: ``embed_prefix``
    then gathers exactly the features a full camera list with a masked camera gives.
    """
    device, dtype = model.device, model.dtype
    pixels = _stack([prepared.pixels], device, dtype)
    return ModelInputs(
        input_ids=_stack([prepared.input_ids], device),
        pixel_values=pixels,
        pixel_attention_mask=torch.ones(pixels.shape[:2], dtype=torch.bool, device=device),
        attention_mask=_stack([prepared.attention_mask], device),
        state=_stack([prepared.state], device, dtype),
    )


def batch_key(req: Pi0State) -> tuple[int, int]:
    """Requests with equal keys stack into one batch: present cameras, prompt length.

    The prompt is padded to the preset's length, so with the same cameras present
    every stage's tensors of two requests differ only in their values.
    """
    return int(req.prepared.pixels.shape[0]), int(req.prepared.input_ids.shape[0])


def _check_batch(reqs: list[Pi0State], stage: Stage) -> None:
    if not reqs:
        raise ValueError("a batch needs at least one request")
    for req in reqs:
        req.expect(stage)
    if len({batch_key(r) for r in reqs}) > 1:
        raise ValueError("requests of one batch need the same cameras and prompt length")


def _stack(arrays: list[np.ndarray], device: torch.device, dtype: torch.dtype | None = None,
           ) -> torch.Tensor:
    return to_device(np.stack(arrays), device, dtype)


def _rows(tensors: list[torch.Tensor]) -> torch.Tensor:
    """The requests' rows as one batch; a lone request's own tensor, not a copy of it.

    The stages read these tensors and never write into them.
    """
    return tensors[0] if len(tensors) == 1 else torch.cat(tensors)


def vit(model: PI0ForConditionalGeneration, req: Pi0State) -> None:
    """ViT stage of one request (:func:`vit_batch` of one)."""
    vit_batch(model, [req])


@torch.no_grad()
def vit_batch(model: PI0ForConditionalGeneration, reqs: list[Pi0State]) -> None:
    """ViT stage: ``embed_prefix`` (vision tower, projector, token embeddings) at once.

    Raises:
        ValueError: on an empty batch or requests with different :func:`batch_key`.
    """
    _check_batch(reqs, Stage.VIT)
    device, dtype = model.device, model.dtype
    pixels = _stack([r.prepared.pixels for r in reqs], device, dtype)
    embeds = model.model.embed_prefix(
        _stack([r.prepared.input_ids for r in reqs], device), pixels,
        torch.ones(pixels.shape[:2], dtype=torch.bool, device=device))
    for row, req in enumerate(reqs):
        req.prefix_embeds = embeds[row:row + 1]
        req.progress = Stage.PREFILL


def prefill(model: PI0ForConditionalGeneration, req: Pi0State) -> None:
    """Prefill stage of one request (:func:`prefill_batch` of one)."""
    prefill_batch(model, [req])


@torch.no_grad()
def prefill_batch(model: PI0ForConditionalGeneration, reqs: list[Pi0State]) -> None:
    """Prefill stage: the PaliGemma language model over the prefixes, with a cache.

    Each request keeps its own rows of every layer's keys and values.

    Raises:
        ValueError: on an empty batch or requests with different :func:`batch_key`.
    """
    _check_batch(reqs, Stage.PREFILL)
    if any(r.prefix_embeds is None for r in reqs):
        raise RuntimeError("prefix embeddings were released before prefill")
    embeds = _rows([r.prefix_embeds for r in reqs if r.prefix_embeds is not None])
    mask = _stack([r.prepared.attention_mask for r in reqs], embeds.device)
    cache = model.model.vlm(
        inputs_embeds=embeds,
        attention_mask=mask,
        position_ids=mask.cumsum(-1) - 1,
        token_type_ids=torch.zeros_like(embeds)[:, :, 0],
        use_cache=True,
    ).cache
    kv = cache_kv(cache)
    for row, req in enumerate(reqs):
        req.prefix_kv = [(k[row:row + 1], v[row:row + 1]) for k, v in kv]
        req.prefix_embeds = None
        req.progress = Stage.ACTION


def prefix_cache(prefix_kv: PrefixKV) -> DynamicCache:
    """A fresh cache over ``prefix_kv``, holding its tensors: one denoising step appends to it.

    A ``DynamicLayer`` never writes into the tensors it holds (``update`` concatenates
    into new ones, ``crop`` slices), so every step's cache shares the prefix tensors,
    as ``sample_actions``' one cache does. Filling the cache through ``update`` would
    copy every layer's keys and values, and allocate two empty tensors per layer, at
    every step: 0.1 ms a step on ``pi0-tiny``, a third of the stage split's cost
    against one ``sample_actions`` call (docs/BENCHMARKS.md, section 4.3).
    """
    cache = DynamicCache()
    cache.layers.extend(_prefix_layer(keys, values) for keys, values in prefix_kv)
    return cache


def _prefix_layer(keys: torch.Tensor, values: torch.Tensor) -> DynamicLayer:
    """A layer in the state ``lazy_initialization`` and a first ``update`` leave, uncopied."""
    layer = DynamicLayer()  # type: ignore[no-untyped-call]  # transformers leaves it untyped
    layer.device = keys.device
    layer.keys, layer.values = keys, values
    layer.is_initialized = True
    return layer


def sample_noise(model: PI0ForConditionalGeneration, seed: int) -> torch.Tensor:
    """Seeded ``(1, H, max_action_dim)`` float32 noise, drawn on the CPU.

    Every device draws the same noise. The flow state, the guidance arithmetic and the
    time embedding (transformers' own) stay float32 whatever the parameters' dtype;
    only the expert's forward runs in it.
    """
    return _noise(model.config, seed, model.device)


def _noise(config: PI0Config, seed: int, device: torch.device) -> torch.Tensor:
    """:func:`sample_noise` on ``device``."""
    gen = torch.Generator(device="cpu").manual_seed(seed)
    noise = torch.randn((1, config.chunk_size, config.max_action_dim), generator=gen,
                        dtype=torch.float32)
    return noise.to(device=device)


def expert_velocity(model: PI0ForConditionalGeneration, x: torch.Tensor,
                    timestep: torch.Tensor, state: torch.Tensor, mask: torch.Tensor,
                    *prefix: torch.Tensor) -> torch.Tensor:
    """``v(x, t)``: one forward of the action expert, as float32.

    ``prefix`` is every layer's prefix keys then values, flat. The step's cache is
    built from them afresh, which is what ``sample_actions`` gets by cropping its cache
    back to the prefix after every step; as a function of tensors alone it is also
    what ``torch.compile`` traces.
    """
    cache = prefix_cache(list(zip(prefix[::2], prefix[1::2], strict=True)))
    return model(state=state, noise=x, timestep=timestep, attention_mask=mask,  # type: ignore[no-any-return]
                 cache=cache).logits.float()


def velocity_function(model: PI0ForConditionalGeneration,
                      mode: str = "off") -> Callable[..., torch.Tensor]:
    """The expert step of ``model`` run eagerly or compiled (one compilation per model).

    ``cudagraphs`` is ``torch.compile``'s ``reduce-overhead`` mode, whose outputs are
    copied out of the graph's memory before the next replay reuses it; its graphs'
    static buffers are shared, so only one thread may replay them (the engine allows
    it with one Action lane). On an H200 it ran the guided Action unit of ``pi0`` 13x
    faster than eager (docs/BENCHMARKS.md, "On one H200").

    Raises:
        ValueError: on a mode not in :data:`COMPILE_MODES`, or ``cudagraphs`` off CUDA.
    """
    if mode not in COMPILE_MODES:
        raise ValueError(f"compile mode must be one of {COMPILE_MODES}, got {mode!r}")
    step = functools.partial(expert_velocity, model)
    if mode == "off":
        return step
    if mode == "cudagraphs" and model.device.type != "cuda":
        raise ValueError("compile mode 'cudagraphs' needs a CUDA device")
    # Kept on the model, so that it goes with the model (a module-level cache keyed by
    # the model would keep it alive: the compiled step holds it).
    compiled: dict[str, Callable[..., torch.Tensor]] = model.__dict__.setdefault(
        "_xinfer_compiled_steps", {})
    fn = compiled.get(mode)
    if fn is None:
        fn = torch.compile(step, mode="reduce-overhead" if mode == "cudagraphs" else None)
        if mode == "cudagraphs":
            fn = _fresh_outputs(fn)
        compiled[mode] = fn
    return fn


def _fresh_outputs(fn: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    """A CUDA-graph step whose output outlives the next replay (which reuses its memory)."""
    def step(*args: torch.Tensor) -> torch.Tensor:
        torch.compiler.cudagraph_mark_step_begin()  # type: ignore[no-untyped-call]
        return fn(*args).clone()
    return step


@dataclasses.dataclass
class _Denoiser:
    """The action expert's velocity for a batch of requests, over their prefixes."""

    step: Callable[..., torch.Tensor]
    prefix: tuple[torch.Tensor, ...]
    state: torch.Tensor
    mask: torch.Tensor

    def velocity(self, x: torch.Tensor, time: float) -> torch.Tensor:
        """``v(x, t)`` of the float32 state ``x``, as float32."""
        timestep = torch.full((x.shape[0],), time, dtype=torch.float32, device=x.device)
        if x.dtype != self.state.dtype:
            x = x.to(self.state.dtype)
        return self.step(x, timestep, self.state, self.mask, *self.prefix)

    def guided(self, x: torch.Tensor, time: float, *, target: torch.Tensor,
               weights: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """RTC's guided velocity (see the module docstring), detached.

        ``weight`` is each row's guidance weight, ``(B, 1, 1)``; rows of zero weight
        and zero ``weights`` get the plain velocity.
        """
        with torch.enable_grad():
            xg = x.detach().requires_grad_(True)
            velocity = self.velocity(xg, time)
            denoised = xg - time * velocity
            error = (target - denoised) * weights
            (vjp,) = torch.autograd.grad(denoised, xg, grad_outputs=error.detach())
        return velocity.detach() - weight * vjp


@dataclasses.dataclass
class _Guidance:
    """The rows' real-time-chunking inputs as batch tensors (zero on rows without)."""

    target: torch.Tensor
    weights: torch.Tensor
    step_weights: torch.Tensor
    frozen: list[tuple[int, int]]

    @classmethod
    def of(cls, reqs: list[Pi0State], noise: torch.Tensor, steps: int) -> _Guidance | None:
        if all(r.prepared.rtc is None for r in reqs):
            return None
        target, weights = torch.zeros_like(noise), torch.zeros_like(noise)
        step_weights = torch.zeros((steps, len(reqs), 1, 1), dtype=noise.dtype,
                                   device=noise.device)
        frozen = []
        for row, req in enumerate(reqs):
            rtc = req.prepared.rtc
            if rtc is None:
                frozen.append((0, 0))
                continue
            dim = rtc.aligned_norm.shape[1]
            target[row, :, :dim] = to_device(rtc.aligned_norm, noise.device)
            weights[row, :, :dim] = to_device(rtc.weights, noise.device)[:, None]
            step_weights[:, row, 0, 0] = torch.as_tensor(
                np.asarray(rtc.step_weights[:steps], dtype=np.float64), dtype=noise.dtype)
            frozen.append((rtc.frozen, dim))
        return cls(target, weights, step_weights, frozen)

    def pin(self, x: torch.Tensor, noise: torch.Tensor, time: float) -> torch.Tensor:
        """``x`` with each row's first ``d`` keyframes on their straight path at ``time``."""
        if not any(f for f, _ in self.frozen):
            return x
        x = x.clone()
        for row, (f, dim) in enumerate(self.frozen):
            if f:
                x[row, :f, :dim] = (time * noise[row, :f, :dim]
                                    + (1.0 - time) * self.target[row, :f, :dim])
        return x


def action(model: PI0ForConditionalGeneration, req: Pi0State, guidance: bool = True,
           compile_mode: str = "off") -> None:
    """Action stage of one request (:func:`action_batch` of one)."""
    action_batch(model, [req], guidance, compile_mode)


@torch.no_grad()
def action_batch(model: PI0ForConditionalGeneration, reqs: list[Pi0State],
                 guidance: bool = True, compile_mode: str = "off") -> None:
    """Action stage: K Euler steps of the action expert over the cached prefixes.

    Rows are independent (the expert attends within its own row), so a batch gives
    each request the chunk it gets alone, up to the kernels' rounding.

    Args:
        model: The model.
        reqs: Request states after prefill, of one :func:`batch_key`.
        guidance: Apply RTC guidance to requests with a previous chunk (switch off
            only to compare against unguided sampling).
        compile_mode: How the expert step runs
            (:data:`~xinfer_ros.model.presets.COMPILE_MODES`).

    Raises:
        ValueError: on an empty batch, requests with different :func:`batch_key` or
            an unknown compile mode.
    """
    _check_batch(reqs, Stage.ACTION)
    kvs = [r.prefix_kv for r in reqs if r.prefix_kv is not None]
    if len(kvs) != len(reqs):
        raise RuntimeError("prefix cache was released before action")
    prefix = tuple(_rows([kv[layer][part] for kv in kvs])
                   for layer in range(len(kvs[0])) for part in (0, 1))
    # The prefix K/V live on the model's device in its dtype; ``model.device`` and
    # ``model.dtype`` walk every parameter (0.03-0.05 ms each on pi0-tiny).
    device, dtype = prefix[0].device, prefix[0].dtype
    denoiser = _Denoiser(
        velocity_function(model, compile_mode), prefix,
        state=_stack([r.prepared.state for r in reqs], device, dtype),
        mask=_stack([r.prepared.attention_mask for r in reqs], device))
    noise = _rows([_noise(model.config, r.prepared.seed, device) for r in reqs])
    steps = model.config.num_inference_steps
    rtc = _Guidance.of(reqs, noise, steps)
    dt = -1.0 / steps
    x = noise
    for step in range(steps):
        time = 1.0 + step * dt
        if rtc is not None:
            x = rtc.pin(x, noise, time)
        if guidance and rtc is not None:
            velocity = denoiser.guided(x, time, target=rtc.target, weights=rtc.weights,
                                       weight=rtc.step_weights[step])
        else:
            velocity = denoiser.velocity(x, time)
        x = x + dt * velocity
    if rtc is not None:
        x = rtc.pin(x, noise, 0.0)
    x = x.float()
    for row, req in enumerate(reqs):
        req.actions = x[row:row + 1]
        req.progress = None


def run_request(model: PI0ForConditionalGeneration, req: Pi0State,
                guidance: bool = True, compile_mode: str = "off") -> torch.Tensor:
    """Run the remaining stages back to back; ``(1, H, max_action_dim)`` model units."""
    if req.progress is Stage.VIT:
        vit(model, req)
    if req.progress is Stage.PREFILL:
        prefill(model, req)
    if req.progress is Stage.ACTION:
        action(model, req, guidance, compile_mode)
    if req.actions is None:
        raise StageOrderError(f"request {req.prepared.request_id!r} produced no actions")
    return req.actions
