"""The stage split against transformers' own ``sample_actions``, on identical tensors.

Both sides get the same prepared request: the same token ids, pixels, masks, state and
seeded noise, and the same weights. The stage split runs ViT, Prefill and Action as the
engine does (without RTC guidance, which ``sample_actions`` does not have); transformers
runs ``PI0ForConditionalGeneration.sample_actions`` in one call. Their outputs, in model
units before any post-processing, should agree to float rounding.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from transformers import PI0ForConditionalGeneration

from xinfer_ros.model.pi0 import stages
from xinfer_ros.model.pi0.processing import Pi0Prepared

if TYPE_CHECKING:
    from xinfer_ros.model.pi0.preset import Pi0Spec

__all__ = ["PARITY_TOLERANCE", "ParityResult", "check_parity", "parity_request"]

#: The agreement the issue asks for on the CPU in float32.
PARITY_TOLERANCE: float = 1e-5


@dataclasses.dataclass(frozen=True)
class ParityResult:
    """One comparison.

    Attributes:
        max_abs_diff: Largest absolute difference over the ``(H, max_action_dim)`` chunk.
        max_abs_value: Largest absolute value of transformers' chunk (for scale).
        shape: Shape of the compared chunk.
    """

    max_abs_diff: float
    max_abs_value: float
    shape: tuple[int, ...]

    @property
    def ok(self) -> bool:
        """Within :data:`PARITY_TOLERANCE`."""
        return self.max_abs_diff <= PARITY_TOLERANCE


def parity_request(spec: Pi0Spec, seed: int) -> Pi0Prepared:
    """A random request in model units: no tokenizer or statistics needed.

    Every camera is present; the prompt holds a random number of random token ids
    (never the image placeholder) and masked padding; the state is standard normal.
    """
    rng = np.random.default_rng(seed)
    cameras, side = len(spec.cameras), spec.image_size
    pixels = rng.uniform(-1.0, 1.0, (cameras, 3, side, side)).astype(np.float32)
    used = int(rng.integers(2, spec.prompt_tokens + 1))
    text = rng.integers(0, spec.vocab_size - 1, spec.prompt_tokens)
    text[text >= spec.image_token_id] += 1  # skip the placeholder id
    text[used:] = 0
    visual = np.full(cameras * spec.tokens_per_image, spec.image_token_id, np.int64)
    mask = np.concatenate([np.ones_like(visual), (np.arange(spec.prompt_tokens) < used)])
    return Pi0Prepared(
        request_id=f"parity/{seed}", pixels=pixels, camera_mask=(True,) * cameras,
        input_ids=np.concatenate([visual, text.astype(np.int64)]),
        attention_mask=mask.astype(np.int64),
        state=rng.standard_normal(spec.max_state_dim).astype(np.float32), rtc=None,
        seed=seed)


def check_parity(model: PI0ForConditionalGeneration, prepared: Pi0Prepared) -> ParityResult:
    """Run ``prepared`` through the stages and through ``sample_actions``; compare.

    Raises:
        ValueError: When ``prepared`` carries RTC inputs (``sample_actions`` has no RTC).
    """
    if prepared.rtc is not None:
        raise ValueError("parity is defined without real-time chunking: prepare the "
                         "request without a previous chunk")
    ours = stages.run_request(model, stages.Pi0State(prepared))
    inputs = stages.model_inputs(model, prepared)
    sample: Any = model.sample_actions  # typed for LongTensor/BoolTensor, which are Tensors
    with torch.no_grad():
        theirs = sample(
            state=inputs.state, input_ids=inputs.input_ids, pixel_values=inputs.pixel_values,
            noise=stages.sample_noise(model, prepared.seed),
            attention_mask=inputs.attention_mask,
            pixel_attention_mask=inputs.pixel_attention_mask)
    diff = (ours.float() - theirs.float()).abs().max().item()
    return ParityResult(max_abs_diff=float(diff),
                        max_abs_value=float(theirs.float().abs().max().item()),
                        shape=tuple(theirs.shape))
