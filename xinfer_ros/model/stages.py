"""The three non-preemptive stages over one request's private state.

An engine runs, per request::

    prepared = prepare_request(model.config, model.tokenizer, images, instruction, state,
                               prev_chunk=..., d=..., seed=...)      # CPU thread
    req = RequestState(prepared)
    vit(model, req)        # ViT: SigLIP over the cameras, batched per input shape
    prefill(model, req)    # backbone over the prefix -> req.cache (DynamicCache)
    action(model, req)     # K Euler steps of the expert over the cached prefix K/V
    chunk = postprocess_actions(req.actions, model.config, prepared.rtc)  # CPU thread

Each stage only reads and writes ``req`` and the (read-only) weights, so stages of
different requests may interleave in any order that respects each request's own
dependencies. Stages run under ``torch.no_grad``; real-time-chunking guidance enables
autograd locally for the vector-Jacobian product w.r.t. the noisy actions.
"""

from __future__ import annotations

import torch
from transformers import DynamicCache

from xinfer_ros.core.stages import Stage
from xinfer_ros.model.expert import ActionExpert, PrefixKV
from xinfer_ros.model.processing import RTCInputs
from xinfer_ros.model.request import RequestState, StageOrderError, cache_kv
from xinfer_ros.model.transfer import to_device
from xinfer_ros.model.vla import ReferenceVLA

__all__ = ["action", "guided_velocity", "prefill", "run_request", "sample_noise", "vit"]


@torch.no_grad()
def vit(model: ReferenceVLA, req: RequestState) -> None:
    """ViT stage: encode every camera and merge to visual tokens (camera order kept)."""
    req.expect(Stage.VIT)
    device, dtype = model.device, model.dtype
    per_camera: dict[int, torch.Tensor] = {}
    for indices, pixels in req.prepared.pixel_groups:
        batch = to_device(pixels, device, dtype)
        tokens = model.vision(batch)
        for row, cam in enumerate(indices):
            per_camera[cam] = tokens[row]
    ordered = [per_camera[i] for i in sorted(per_camera)]
    req.visual_tokens = torch.cat(ordered, dim=0).unsqueeze(0)
    req.progress = Stage.PREFILL


@torch.no_grad()
def prefill(model: ReferenceVLA, req: RequestState) -> None:
    """Prefill stage: run the backbone once over ``[visual, text+state]`` tokens.

    The prefix uses the backbone's causal mask (Qwen-style). Afterwards ``req.cache``
    holds every layer's keys and values; the action stage only reads them.
    """
    req.expect(Stage.PREFILL)
    if req.visual_tokens is None:
        raise RuntimeError("visual tokens were released before prefill")
    ids = to_device(req.prepared.token_ids, model.device).unsqueeze(0)
    text = model.backbone.embed_tokens(ids)
    embeds = torch.cat([req.visual_tokens.to(text.dtype), text], dim=1)
    cache = DynamicCache(config=model.backbone_config)
    out = model.backbone(inputs_embeds=embeds, cache=cache, use_cache=True)
    req.cache = out.cache
    req.prefix_len = int(embeds.shape[1])
    req.visual_tokens = None  # no longer needed; free the memory early
    req.progress = Stage.ACTION


def sample_noise(model: ReferenceVLA, seed: int) -> torch.Tensor:
    """Seeded ``(1, H, D)`` float32 noise, drawn on CPU so every device gets the same.

    The flow state stays float32 whatever the parameters' dtype: K Euler steps in
    bfloat16 would round the state ten times over.
    """
    spec = model.config.action
    gen = torch.Generator(device="cpu").manual_seed(seed)
    noise = torch.randn((1, spec.horizon, spec.action_dim), generator=gen, dtype=torch.float32)
    return noise.to(device=model.device)


def _velocity(expert: ActionExpert, x: torch.Tensor, tau: torch.Tensor, prefix_kv: PrefixKV,
              rope: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """The expert's velocity of the float32 state ``x``, as float32.

    The network runs in the parameters' dtype (that of the rotary tables).
    """
    velocity: torch.Tensor = expert(x.to(rope[0].dtype), tau, prefix_kv, rope)
    return velocity.float()


def guided_velocity(
    expert: ActionExpert,
    x: torch.Tensor,
    tau: float,
    *,
    prefix_kv: PrefixKV,
    rope: tuple[torch.Tensor, torch.Tensor],
    target: torch.Tensor,
    mask: torch.Tensor,
    weight: float,
) -> torch.Tensor:
    """RTC guided velocity (Black et al. 2025, Alg. 1) by a vector-Jacobian product.

    With ``tau`` from 0 (noise) to 1 (data), the one-step denoised estimate is
    ``x1 = x + (1 - tau) v(x)``. The guidance adds
    ``weight * (dx1/dx)^T [mask * (target - x1)]`` to ``v``.

    Args:
        expert: Velocity network.
        x: ``(1, H, D)`` current noisy chunk.
        tau: Flow time.
        prefix_kv: Cached prefix keys/values (constants here).
        rope: Action-position rotary tables.
        target: ``(1, H, D)`` aligned previous chunk (model units).
        mask: ``(1, H, 1)`` guidance mask.
        weight: Clipped guidance weight at ``tau``.

    Returns:
        The guided velocity, detached.
    """
    tau_t = torch.full((x.shape[0],), tau, device=x.device, dtype=torch.float32)
    with torch.enable_grad():
        xg = x.detach().requires_grad_(True)
        velocity = _velocity(expert, xg, tau_t, prefix_kv, rope)
        denoised = xg + (1.0 - tau) * velocity
        error = (target - denoised) * mask
        (vjp,) = torch.autograd.grad(denoised, xg, grad_outputs=error.detach())
    return velocity.detach() + weight * vjp


@torch.no_grad()
def action(model: ReferenceVLA, req: RequestState, guidance: bool = True) -> None:
    """Action stage: K Euler steps of flow matching from seeded noise.

    The prefix K/V are read once from ``req.cache`` and reused by every step; the
    backbone is not called. With RTC inputs, the first d keyframes follow the straight
    path from their noise to the previous chunk (so they end exactly on it) and, if
    ``guidance``, the velocity gets the RTC guidance term.

    Args:
        model: The model.
        req: Request state after prefill.
        guidance: Apply RTC guidance when the request has a previous chunk (switch off
            only to compare against unguided sampling).
    """
    req.expect(Stage.ACTION)
    if req.cache is None:
        raise RuntimeError("prefix cache was released before action")
    spec = model.config.action
    expert = model.expert
    prefix_kv: PrefixKV = cache_kv(req.cache)
    noise = sample_noise(model, req.prepared.seed)
    positions = torch.arange(spec.horizon, device=noise.device)[None, :] + req.prefix_len
    # Rotary tables in the parameters' dtype (computed in float32 by the module).
    rope = expert.rope(positions, like=noise.to(model.dtype))
    rtc = req.prepared.rtc
    target, mask = _rtc_tensors(rtc, noise) if rtc is not None else (None, None)
    frozen = rtc.frozen if rtc is not None else 0
    x = noise
    dt = 1.0 / spec.num_steps
    for step in range(spec.num_steps):
        tau = step * dt
        if frozen and target is not None:
            x = x.clone()
            x[:, :frozen] = (1.0 - tau) * noise[:, :frozen] + tau * target[:, :frozen]
        if guidance and rtc is not None and target is not None and mask is not None:
            weight = float(rtc.step_weights[step])
            velocity = guided_velocity(
                expert,
                x,
                tau,
                prefix_kv=prefix_kv,
                rope=rope,
                target=target,
                mask=mask,
                weight=weight,
            )
        else:
            tau_t = torch.full((1,), tau, device=x.device, dtype=torch.float32)
            velocity = _velocity(expert, x, tau_t, prefix_kv, rope)
        x = x + dt * velocity
    if frozen and target is not None:
        x = x.clone()
        x[:, :frozen] = target[:, :frozen]
    req.actions = x.float()
    req.progress = None


def _rtc_tensors(rtc: RTCInputs, like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    target = to_device(rtc.aligned_norm, like.device, like.dtype).unsqueeze(0)
    mask = to_device(rtc.weights, like.device, like.dtype).view(1, -1, 1)
    return target, mask


def run_request(model: ReferenceVLA, req: RequestState) -> torch.Tensor:
    """Run the remaining stages back to back (tests, benchmarks, serial backends).

    Returns:
        ``(1, H, D)`` float32 actions in model units.
    """
    if req.progress is Stage.VIT:
        vit(model, req)
    if req.progress is Stage.PREFILL:
        prefill(model, req)
    if req.progress is Stage.ACTION:
        action(model, req)
    if req.actions is None:
        raise StageOrderError(f"request {req.prepared.request_id!r} produced no actions")
    return req.actions
