"""CPU preparation and output processing of π0 requests (no torch import).

Inputs as a robot sends them become the tensors ``PI0ForConditionalGeneration`` takes:

* **images**: one entry per camera of the model, in its order; fewer entries, or
  ``None`` entries, are missing cameras, which are masked out (their visual tokens are
  left out of the prefix, as transformers' ``embed_prefix`` does for a camera whose
  ``pixel_attention_mask`` is False). Each image (an ``HxWx3`` uint8 RGB array or
  JPEG/PNG bytes, any size) is resized with padding to the model's square input
  (openpi's ``resize_with_pad``), with the checkpoint's resampling
  (``Pi0Spec.resample``), and scaled to ``[-1, 1]``;
* **prompt**: the visual tokens, ``<bos>``, the instruction and a newline, padded to the preset's
  prompt length with masked pad tokens;
* **state**: normalised with the checkpoint's statistics and zero-padded to
  ``max_state_dim``;
* **previous chunk**: aligned and normalised for real-time chunking (for a
  relative-action policy, first made relative to this request's state).

The output is sliced back to the robot's ``action_dim``, unnormalised, made absolute
again for a relative-action policy (the raw state added on its joint mask), and its
first ``d`` keyframes are the previous chunk's, bit for bit (they are already
executing).
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from xinfer_ros.model.errors import ImageError, StateError
from xinfer_ros.model.images import (
    ImageInput,
    Resample,
    decode_image,
    fit_image,
    normalize_image,
)
from xinfer_ros.model.pi0.tokenizer import encode_prompt
from xinfer_ros.model.rtc_inputs import RTCInputs, build_rtc_inputs

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from xinfer_ros.model.pi0.preset import Pi0Spec

__all__ = ["Pi0Inputs", "Pi0Prepared", "Pi0Processor"]


@dataclasses.dataclass(frozen=True)
class Pi0Prepared:
    """Model-ready inputs of one request (CPU arrays).

    Attributes:
        request_id: Caller's id, for bookkeeping.
        pixels: ``(cameras present, 3, S, S)`` float32 in ``[-1, 1]``.
        camera_mask: Per model camera, whether its image is present.
        input_ids: ``(L,)`` int64: the present cameras' visual tokens, then the prompt.
        attention_mask: ``(L,)`` int64; 0 on prompt padding.
        state: ``(max_state_dim,)`` float32, normalised and zero-padded.
        rtc: Real-time-chunking inputs, or ``None`` without a previous chunk.
        seed: Seed of the flow-matching noise.
        action_offset: ``(action_dim,)`` float64 added to the unnormalised output: the
            raw state on a relative-action policy's joint mask; ``None`` otherwise.
    """

    request_id: str
    pixels: np.ndarray
    camera_mask: tuple[bool, ...]
    input_ids: np.ndarray
    attention_mask: np.ndarray
    state: np.ndarray
    rtc: RTCInputs | None
    seed: int
    action_offset: np.ndarray | None = None


@dataclasses.dataclass(frozen=True)
class Pi0Inputs:
    """Raw request inputs, as a robot sends them.

    Attributes:
        images: One entry per model camera (``None`` or absent: masked out).
        instruction: Task instruction.
        state: The robot's state vector (``state_dim`` values, robot units).
    """

    images: Sequence[ImageInput | None]
    instruction: str
    state: object


class Pi0Processor:
    """Prepares requests for, and processes outputs of, one resolved π0 model.

    Safe to call from several CPU worker threads at once.
    """

    def __init__(self, spec: Pi0Spec, tokenizer: PreTrainedTokenizerBase) -> None:
        self.spec = spec
        self.tokenizer = tokenizer
        # A Rust tokenizer refuses concurrent borrows; encoding is microseconds.
        self._lock = threading.Lock()

    def prepare(self, inputs: Pi0Inputs, *, prev_chunk: object = None, d: int = 0,
                prev_shift: int = 0, rtc_mode: str = "soft", seed: int = 0,
                request_id: str = "", prev_dims: int | None = None) -> Pi0Prepared:
        """Validate and convert one request (cheap checks first).

        Raises:
            InputError: A subclass naming the malformed field.
        """
        spec = self.spec
        raw = self._raw_state(inputs.state)
        offset = spec.relative.offset(raw) if spec.relative is not None else None
        rtc = build_rtc_inputs(
            prev_chunk, d, horizon=spec.chunk_size, action_dim=spec.action_dim,
            num_steps=spec.num_steps, beta=spec.beta, normalize=self._action_normalizer(offset),
            prev_shift=prev_shift, mode=rtc_mode, prev_dims=prev_dims)
        with self._lock:
            prompt, prompt_mask = encode_prompt(self.tokenizer, inputs.instruction,
                                                spec.prompt_tokens, spec.newline)
        pixels, mask = self._images(inputs.images)
        visual = np.full(len(pixels) * spec.tokens_per_image, spec.image_token_id, np.int64)
        return Pi0Prepared(
            request_id=request_id,
            pixels=np.stack(pixels),
            camera_mask=mask,
            input_ids=np.concatenate([visual, prompt]),
            attention_mask=np.concatenate([np.ones_like(visual), prompt_mask]),
            state=self._model_state(raw),
            rtc=rtc,
            seed=int(seed),
            action_offset=offset,
        )

    def _action_normalizer(self, offset: np.ndarray | None) -> Callable[[np.ndarray], np.ndarray]:
        """Robot-unit actions -> model units for this request (relative to its state)."""
        normalize = self.spec.normalizer.action.normalize
        if offset is None:
            return normalize
        return lambda actions: normalize(actions - offset)

    def _raw_state(self, state: object) -> np.ndarray:
        spec = self.spec
        try:
            arr = np.asarray(state, dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise StateError("state", f"not a numeric vector: {exc}") from exc
        if arr.ndim != 1:
            raise StateError("state", f"expected a vector, got shape {arr.shape}")
        if arr.size > spec.max_state_dim:
            raise StateError("state", f"{arr.size} values exceed the model's max_state_dim "
                                      f"{spec.max_state_dim}")
        if arr.size != spec.state_dim:
            raise StateError("state", f"expected {spec.state_dim} values, got {arr.size}")
        if not np.all(np.isfinite(arr)):
            raise StateError("state", "contains NaN or Inf")
        return arr

    def _model_state(self, raw: np.ndarray) -> np.ndarray:
        padded = np.zeros(self.spec.max_state_dim, dtype=np.float32)
        padded[:raw.size] = self.spec.normalizer.state.normalize(raw)
        return padded

    def _images(self, images: object) -> tuple[list[np.ndarray], tuple[bool, ...]]:
        cameras = len(self.spec.cameras)
        if isinstance(images, np.ndarray | bytes) or not isinstance(images, Sequence):
            raise ImageError("images", f"expected a list of up to {cameras} camera images")
        if len(images) > cameras:
            raise ImageError("images", f"{len(images)} images for a model of {cameras} "
                                       f"cameras {list(self.spec.cameras)}")
        size = self.spec.image_size
        pixels: list[np.ndarray] = []
        mask = [False] * cameras
        for index, image in enumerate(images):
            if image is None:
                continue
            rgb = decode_image(image, f"images[{index}]")
            pixels.append(normalize_image(fit_image(
                rgb, size, size, "pad", cast("Resample", self.spec.resample))))
            mask[index] = True
        if not pixels:
            raise ImageError("images", "no camera image: at least one is needed")
        return pixels, tuple(mask)

    def postprocess(self, actions: Any, rtc: RTCInputs | None,
                    action_offset: np.ndarray | None = None) -> np.ndarray:
        """The chunk in robot units ``(H, action_dim)`` from the model's padded output.

        Args:
            actions: ``(H, max_action_dim)`` or ``(1, H, max_action_dim)`` array or tensor.
            rtc: The request's RTC inputs; its committed keyframes are copied exactly.
            action_offset: The request's :attr:`Pi0Prepared.action_offset`.
        """
        if hasattr(actions, "detach"):
            actions = actions.detach().to("cpu").float().numpy()
        spec = self.spec
        arr = np.asarray(actions, dtype=np.float64).reshape(spec.chunk_size,
                                                            spec.max_action_dim)
        out = spec.normalizer.action.unnormalize(arr[:, :spec.action_dim])
        if action_offset is not None:
            out = out + action_offset
        if rtc is not None and rtc.frozen:
            out[:rtc.frozen] = rtc.aligned_raw[:rtc.frozen]
        return out
