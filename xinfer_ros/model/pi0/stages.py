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

import torch
from transformers import DynamicCache, PI0ForConditionalGeneration

from xinfer_ros.model.pi0.processing import Pi0Prepared
from xinfer_ros.model.request import StagedState, StageOrderError, StageProgress, cache_kv

__all__ = ["ModelInputs", "Pi0State", "action", "model_inputs", "prefill", "run_request",
           "sample_noise", "vit"]

#: A layer's cached prefix keys and values.
PrefixKV = list[tuple[torch.Tensor, torch.Tensor]]


@dataclasses.dataclass
class Pi0State(StagedState):
    """Everything one π0 request owns between stages.

    Attributes:
        prepared: CPU inputs.
        prefix_embeds: ``(1, L, hidden)`` after ViT; released by Prefill.
        cache: The language model's cache over the prefix, after Prefill.
        prefix_kv: Each layer's prefix keys and values (what every step starts from).
        actions: ``(1, H, max_action_dim)`` float32 in model units, after Action.
        progress: Next stage to run.
    """

    prepared: Pi0Prepared
    prefix_embeds: torch.Tensor | None = None
    cache: DynamicCache | None = None
    prefix_kv: PrefixKV | None = None
    actions: torch.Tensor | None = None
    progress: StageProgress = StageProgress.VIT

    def release(self) -> None:
        """Drop the device tensors once the result is taken."""
        self.prefix_embeds = None
        self.cache = None
        self.prefix_kv = None


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
    pixels = torch.from_numpy(prepared.pixels).to(device=device, dtype=dtype).unsqueeze(0)
    return ModelInputs(
        input_ids=torch.from_numpy(prepared.input_ids).to(device).unsqueeze(0),
        pixel_values=pixels,
        pixel_attention_mask=torch.ones(pixels.shape[:2], dtype=torch.bool, device=device),
        attention_mask=torch.from_numpy(prepared.attention_mask).to(device).unsqueeze(0),
        state=torch.from_numpy(prepared.state).to(device=device, dtype=dtype).unsqueeze(0),
    )


@torch.no_grad()
def vit(model: PI0ForConditionalGeneration, req: Pi0State) -> None:
    """ViT stage: ``embed_prefix`` (vision tower, projector, token embeddings)."""
    req.expect(StageProgress.VIT)
    inputs = model_inputs(model, req.prepared)
    req.prefix_embeds = model.model.embed_prefix(inputs.input_ids, inputs.pixel_values,
                                                 inputs.pixel_attention_mask)
    req.progress = StageProgress.PREFILL


@torch.no_grad()
def prefill(model: PI0ForConditionalGeneration, req: Pi0State) -> None:
    """Prefill stage: the PaliGemma language model over the prefix, with a cache."""
    req.expect(StageProgress.PREFILL)
    if req.prefix_embeds is None:
        raise RuntimeError("prefix embeddings were released before prefill")
    mask = torch.from_numpy(req.prepared.attention_mask).to(model.device).unsqueeze(0)
    embeds = req.prefix_embeds
    cache = model.model.vlm(
        inputs_embeds=embeds,
        attention_mask=mask,
        position_ids=mask.cumsum(-1) - 1,
        token_type_ids=torch.zeros_like(embeds)[:, :, 0],
        use_cache=True,
    ).cache
    req.cache = cache
    req.prefix_kv = cache_kv(cache)
    req.prefix_embeds = None
    req.progress = StageProgress.ACTION


def sample_noise(model: PI0ForConditionalGeneration, seed: int) -> torch.Tensor:
    """Seeded ``(1, H, max_action_dim)`` float32 noise, drawn on the CPU.

    Every device draws the same noise. The flow state, the guidance arithmetic and the
    time embedding (transformers' own) stay float32 whatever the parameters' dtype;
    only the expert's forward runs in it.
    """
    config = model.config
    gen = torch.Generator(device="cpu").manual_seed(seed)
    noise = torch.randn((1, config.chunk_size, config.max_action_dim), generator=gen,
                        dtype=torch.float32)
    return noise.to(device=model.device)


def _restore_prefix(cache: DynamicCache, prefix_kv: PrefixKV) -> None:
    """Reset the cache to the prefix, as ``sample_actions``'s crop does.

    Assigning the saved tensors (instead of slicing) also drops any autograd history a
    guided step attached to the cache.
    """
    for layer, (keys, values) in zip(cache.layers, prefix_kv, strict=True):
        layer.keys, layer.values = keys, values  # type: ignore[union-attr]


@dataclasses.dataclass
class _Denoiser:
    """The action expert's velocity for one request, over its cached prefix."""

    model: PI0ForConditionalGeneration
    cache: DynamicCache
    prefix_kv: PrefixKV
    state: torch.Tensor
    mask: torch.Tensor

    def velocity(self, x: torch.Tensor, time: float) -> torch.Tensor:
        """``v(x, t)``: one forward of the expert, the cache reset to the prefix after it."""
        timestep = torch.full((x.shape[0],), time, dtype=torch.float32, device=x.device)
        try:
            return self.model(state=self.state, noise=x.to(self.state.dtype), timestep=timestep,
                              attention_mask=self.mask, cache=self.cache).logits.float()
        finally:
            _restore_prefix(self.cache, self.prefix_kv)

    def guided(self, x: torch.Tensor, time: float, *, target: torch.Tensor,
               weights: torch.Tensor, weight: float) -> torch.Tensor:
        """RTC's guided velocity (see the module docstring), detached."""
        with torch.enable_grad():
            xg = x.detach().requires_grad_(True)
            velocity = self.velocity(xg, time)
            denoised = xg - time * velocity
            error = (target - denoised) * weights
            (vjp,) = torch.autograd.grad(denoised, xg, grad_outputs=error.detach())
        return velocity.detach() - weight * vjp


@torch.no_grad()
def action(model: PI0ForConditionalGeneration, req: Pi0State, guidance: bool = True) -> None:
    """Action stage: K Euler steps of the action expert over the cached prefix.

    Args:
        model: The model.
        req: Request state after prefill.
        guidance: Apply RTC guidance when the request has a previous chunk (switch off
            only to compare against unguided sampling).
    """
    req.expect(StageProgress.ACTION)
    if req.cache is None or req.prefix_kv is None:
        raise RuntimeError("prefix cache was released before action")
    prepared = req.prepared
    device, dtype = model.device, model.dtype
    denoiser = _Denoiser(
        model, req.cache, req.prefix_kv,
        state=torch.from_numpy(prepared.state).to(device=device, dtype=dtype).unsqueeze(0),
        mask=torch.from_numpy(prepared.attention_mask).to(device).unsqueeze(0))
    noise = sample_noise(model, prepared.seed)
    rtc = prepared.rtc
    frozen = rtc.frozen if rtc is not None else 0
    dim = rtc.aligned_norm.shape[1] if rtc is not None else 0
    target = weights = None
    if rtc is not None:
        target = torch.zeros_like(noise)
        target[0, :, :dim] = torch.from_numpy(rtc.aligned_norm).to(device)
        weights = torch.zeros_like(noise)
        weights[0, :, :dim] = torch.from_numpy(rtc.weights).to(device)[:, None]
    steps = model.config.num_inference_steps
    dt = -1.0 / steps
    x = noise
    for step in range(steps):
        time = 1.0 + step * dt
        if frozen and target is not None:
            x = x.clone()
            x[:, :frozen, :dim] = (time * noise[:, :frozen, :dim]
                                   + (1.0 - time) * target[:, :frozen, :dim])
        if guidance and rtc is not None and target is not None and weights is not None:
            velocity = denoiser.guided(x, time, target=target, weights=weights,
                                       weight=float(rtc.step_weights[step]))
        else:
            velocity = denoiser.velocity(x, time)
        x = x + dt * velocity
    if frozen and target is not None:
        x = x.clone()
        x[:, :frozen, :dim] = target[:, :frozen, :dim]
    req.actions = x.float()
    req.progress = StageProgress.DONE


def run_request(model: PI0ForConditionalGeneration, req: Pi0State,
                guidance: bool = True) -> torch.Tensor:
    """Run the remaining stages back to back; ``(1, H, max_action_dim)`` model units."""
    if req.progress is StageProgress.VIT:
        vit(model, req)
    if req.progress is StageProgress.PREFILL:
        prefill(model, req)
    if req.progress is StageProgress.ACTION:
        action(model, req, guidance)
    if req.actions is None:
        raise StageOrderError(f"request {req.prepared.request_id!r} produced no actions")
    return req.actions
