"""CPU input preparation and output processing (no torch import).

The engine runs :func:`prepare_request` and :func:`postprocess_actions` on CPU threads
while the GPU executes other requests' stages (paper §6.4 "C": CPU overlap). All input
validation happens here, so a malformed request fails before any model work with an
:class:`~xinfer_ros.model.errors.InputError` naming the field.

Image rules: each camera image is either an ``HxWx3`` ``uint8`` RGB array or an encoded
JPEG/PNG byte string (decoded with OpenCV, BGR -> RGB). Its aspect ratio must match the
camera's model input within :data:`ASPECT_TOLERANCE`, and it must be at least one patch
in each direction; it is then resized with OpenCV (area filter when shrinking, bilinear
when enlarging) and normalised to ``[-1, 1]`` (SigLIP's mean 0.5 / std 0.5).

State rules: a finite vector of ``state_dim`` values, normalised with the preset's
mean/std, clipped to ``[-1, 1]``, zero-padded to ``state_pad_dim`` and discretised into
``state_bins`` uniform bins (π0.5-style; one token per padded dim).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from xinfer_ros.model.config import CameraSpec, VLAConfig
from xinfer_ros.model.errors import ImageError, InputError, StateError
from xinfer_ros.model.images import ImageInput, decode_image, fit_image, normalize_image
from xinfer_ros.model.rtc_inputs import RTCInputs, build_rtc_inputs
from xinfer_ros.model.tokenizer import ByteTokenizer

__all__ = [
    "ASPECT_TOLERANCE",
    "ImageInput",
    "PreparedRequest",
    "RTCInputs",
    "decode_image",
    "discretize_state",
    "group_cameras",
    "normalize_image",
    "postprocess_actions",
    "prepare_images",
    "prepare_request",
    "prepare_rtc",
    "resize_image",
]

#: Largest relative aspect-ratio mismatch accepted before resizing (resizing beyond it
#: would distort the scene the policy sees).
ASPECT_TOLERANCE: float = 0.02


@dataclasses.dataclass(frozen=True)
class PreparedRequest:
    """Model-ready inputs of one request (CPU arrays).

    Attributes:
        request_id: Caller's id, carried through for bookkeeping.
        pixel_groups: ``(camera indices, pixels (B, 3, H, W) float32)`` per distinct
            input shape, so the ViT runs one batch per shape.
        token_ids: Text-segment token ids (after the visual tokens), int64.
        rtc: RTC inputs, or ``None`` without a previous chunk.
        seed: Seed of the flow-matching noise.
    """

    request_id: str
    pixel_groups: tuple[tuple[tuple[int, ...], np.ndarray], ...]
    token_ids: np.ndarray
    rtc: RTCInputs | None
    seed: int


def resize_image(image: np.ndarray, camera: CameraSpec, patch_size: int, field: str) -> np.ndarray:
    """Resize to the camera's model input size after checking the aspect ratio.

    Raises:
        ImageError: If the image is smaller than a patch or its aspect ratio differs
            from the camera's by more than :data:`ASPECT_TOLERANCE`.
    """
    height, width = image.shape[:2]
    if height < patch_size or width < patch_size:
        raise ImageError(field, f"size {height}x{width} is smaller than one patch")
    if (height, width) == (camera.height, camera.width):
        return image
    want = camera.width / camera.height
    got = width / height
    if abs(got / want - 1.0) > ASPECT_TOLERANCE:
        raise ImageError(
            field,
            f"size {height}x{width} does not match camera {camera.name} "
            f"({camera.height}x{camera.width}) aspect ratio",
        )
    return fit_image(image, camera.height, camera.width, "stretch")


def group_cameras(
    pixels: Sequence[np.ndarray],
) -> tuple[tuple[tuple[int, ...], np.ndarray], ...]:
    """Stack cameras of equal shape into batches, keeping request order inside each."""
    groups: dict[tuple[int, ...], list[int]] = {}
    for idx, arr in enumerate(pixels):
        groups.setdefault(tuple(arr.shape), []).append(idx)
    return tuple(
        (tuple(indices), np.stack([pixels[i] for i in indices])) for indices in groups.values()
    )


def prepare_images(
    images: Sequence[ImageInput], config: VLAConfig
) -> tuple[tuple[tuple[int, ...], np.ndarray], ...]:
    """Decode, validate, resize, normalise and group the camera images.

    Raises:
        ImageError: Naming ``images`` or ``images[i]``.
    """
    if isinstance(images, np.ndarray | bytes) or len(images) != len(config.cameras):
        count = "one array" if isinstance(images, np.ndarray | bytes) else len(images)
        raise ImageError("images", f"expected {len(config.cameras)} cameras, got {count}")
    pixels = []
    for idx, (image, camera) in enumerate(zip(images, config.cameras, strict=True)):
        field = f"images[{idx}]"
        rgb = decode_image(image, field)
        resized = resize_image(rgb, camera, config.vision.patch_size, field)
        pixels.append(normalize_image(resized))
    return group_cameras(pixels)


def _per_dim(values: tuple[float, ...] | None, dim: int, default: float, name: str) -> np.ndarray:
    if values is None:
        return np.full(dim, default, dtype=np.float64)
    arr = np.asarray(values, dtype=np.float64)
    if arr.shape != (dim,):
        raise ValueError(f"norm.{name} must have {dim} entries, got {arr.shape}")
    return arr


def discretize_state(state: object, config: VLAConfig) -> np.ndarray:
    """Normalise, clip, pad and bin the robot state.

    Returns:
        Int64 bins of shape ``(state_pad_dim,)`` in ``[0, state_bins)``.

    Raises:
        StateError: On a wrong shape or non-finite values.
    """
    spec = config.action
    try:
        arr = np.asarray(state, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise StateError("state", f"not a numeric vector: {exc}") from exc
    if arr.shape != (spec.state_dim,):
        raise StateError("state", f"expected shape ({spec.state_dim},), got {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise StateError("state", "contains NaN or Inf")
    mean = _per_dim(config.norm.state_mean, spec.state_dim, 0.0, "state_mean")
    std = _per_dim(config.norm.state_std, spec.state_dim, 1.0, "state_std")
    unit = np.clip((arr - mean) / std, -1.0, 1.0)
    padded = np.zeros(spec.state_pad_dim, dtype=np.float64)
    padded[: spec.state_dim] = unit
    bins = np.floor((padded + 1.0) * 0.5 * spec.state_bins).astype(np.int64)
    return np.clip(bins, 0, spec.state_bins - 1)


def prepare_rtc(
    prev_chunk: object,
    d: int,
    *,
    config: VLAConfig,
    prev_shift: int = 0,
    mode: str = "soft",
    beta: float | None = None,
    prev_dims: int | None = None,
) -> RTCInputs | None:
    """Validate and align the previous chunk; build guidance masks and weights.

    Args:
        prev_chunk: Previous chunk ``(H, D)`` in robot units, or ``None``.
        d: Commit length (frozen keyframes).
        prev_shift: Keyframes of the previous chunk executed before this chunk starts.
        prev_dims: Real leading columns of ``prev_chunk`` (None: all); see
            :func:`~xinfer_ros.model.rtc_inputs.build_rtc_inputs`.
        mode: ``"soft"`` or ``"hard"`` guidance mask.
        config: Model configuration.
        beta: Guidance clip; the preset's when ``None``.

    Returns:
        The RTC inputs, or ``None`` when there is no previous chunk.

    Raises:
        CommitLengthError: If ``d`` or ``prev_shift`` is out of range.
        ChunkShapeError: If the previous chunk is not a finite ``(H, D)`` array.
        InputError: On an unknown mode.
    """
    spec = config.action
    mean = _per_dim(config.norm.action_mean, spec.action_dim, 0.0, "action_mean")
    std = _per_dim(config.norm.action_std, spec.action_dim, 1.0, "action_std")
    return build_rtc_inputs(
        prev_chunk, d, horizon=spec.horizon, action_dim=spec.action_dim,
        num_steps=spec.num_steps, beta=spec.beta if beta is None else beta,
        normalize=lambda aligned: (aligned - mean) / std, prev_shift=prev_shift, mode=mode,
        prev_dims=prev_dims)


def prepare_request(
    config: VLAConfig,
    tokenizer: ByteTokenizer,
    images: Sequence[ImageInput],
    instruction: str,
    state: object,
    *,
    prev_chunk: object = None,
    d: int = 0,
    prev_shift: int = 0,
    rtc_mode: str = "soft",
    beta: float | None = None,
    seed: int = 0,
    request_id: str = "",
    prev_dims: int | None = None,
) -> PreparedRequest:
    """Validate and convert one request's raw inputs into model-ready arrays.

    Checks run cheapest-first and all before any image work that could be wasted.

    Args:
        config: Model configuration.
        tokenizer: Tokenizer of the model.
        images: One image per configured camera (arrays or encoded bytes).
        instruction: Task instruction.
        state: Robot state vector (``state_dim`` values, robot units).
        prev_chunk: Previous chunk ``(H, D)`` for real-time chunking, or ``None``.
        d: Commit length (frozen keyframes).
        prev_shift: Keyframes of ``prev_chunk`` executed before this chunk starts.
        prev_dims: Real leading columns of ``prev_chunk`` (None: all).
        rtc_mode: ``"soft"`` or ``"hard"`` guidance mask.
        beta: RTC guidance clip (preset default when ``None``).
        seed: Seed of the flow-matching noise.
        request_id: Caller's id.

    Returns:
        The prepared request.

    Raises:
        InputError: A subclass naming the malformed field.
    """
    if not isinstance(instruction, str):
        raise InputError("instruction", f"expected str, got {type(instruction)}")
    bins = discretize_state(state, config)
    rtc = prepare_rtc(prev_chunk, d, config=config, prev_shift=prev_shift, mode=rtc_mode, beta=beta,
                      prev_dims=prev_dims)
    pixel_groups = prepare_images(images, config)
    ids = tokenizer.build_prompt(
        config.prompt_template, instruction, bins, config.action.state_format
    )
    return PreparedRequest(
        request_id=request_id,
        pixel_groups=pixel_groups,
        token_ids=np.asarray(ids, dtype=np.int64),
        rtc=rtc,
        seed=int(seed),
    )


def postprocess_actions(actions: Any, config: VLAConfig, rtc: RTCInputs | None) -> np.ndarray:
    """Unnormalise a chunk to robot units and copy the committed prefix exactly.

    Args:
        actions: ``(H, D)`` or ``(1, H, D)`` tensor or array in model units.
        config: Model configuration.
        rtc: The request's RTC inputs (the first ``d`` keyframes are replaced by the
            aligned previous chunk bit for bit: they are already executing).

    Returns:
        Float64 array ``(H, D)`` in robot units.
    """
    if hasattr(actions, "detach"):
        actions = actions.detach().to("cpu").float().numpy()
    arr = np.asarray(actions, dtype=np.float64).reshape(
        config.action.horizon, config.action.action_dim
    )
    dim = config.action.action_dim
    mean = _per_dim(config.norm.action_mean, dim, 0.0, "action_mean")
    std = _per_dim(config.norm.action_std, dim, 1.0, "action_std")
    out: np.ndarray = arr * std + mean
    if rtc is not None and rtc.frozen:
        out[: rtc.frozen] = rtc.aligned_raw[: rtc.frozen]
    return out
