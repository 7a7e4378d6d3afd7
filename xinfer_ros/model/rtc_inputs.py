"""Real-time-chunking inputs of one request, shared by every model (no torch import).

A request may carry the robot's previous chunk ``(H, D)`` in robot units, the commit
length ``d`` and the number of its keyframes already executed (``prev_shift``). This
module validates them, aligns the previous chunk onto the new chunk's time axis and
builds the guidance mask and per-step weights of :mod:`xinfer_ros.rtc.masks`. Only the
normalisation into model units differs between models; it is passed in.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

from xinfer_ros.model.errors import ChunkShapeError, CommitLengthError, InputError
from xinfer_ros.rtc.masks import align_previous_chunk, guidance_weights, prefix_weights

__all__ = ["RTC_MODES", "RTCInputs", "build_rtc_inputs"]

#: Guidance mask modes: soft (exponential decay over the overlap) or hard (first d).
RTC_MODES: tuple[str, ...] = ("soft", "hard")


@dataclasses.dataclass(frozen=True)
class RTCInputs:
    """Real-time chunking inputs of one request, already validated and aligned.

    Attributes:
        aligned_raw: Previous chunk on the new chunk's time axis, robot units ``(H, D)``.
        aligned_norm: The same in model (normalised) units, float32; zero past the
            overlap.
        weights: Guidance mask ``(H,)`` (soft or hard), float32.
        frozen: Committed keyframes d (copied exactly into the output).
        overlap: Keyframes covered by the previous chunk.
        mode: ``"soft"`` or ``"hard"``.
        step_weights: Guidance weight per Euler step ``(K,)``, in step order.
    """

    aligned_raw: np.ndarray
    aligned_norm: np.ndarray
    weights: np.ndarray
    frozen: int
    overlap: int
    mode: str
    step_weights: np.ndarray


def _index(value: object, name: str, upper: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) \
            or not 0 <= value <= upper:
        raise CommitLengthError(name, f"must be an integer in [0, H={upper}], got {value!r}")
    return int(value)


def build_rtc_inputs(
    prev_chunk: object,
    d: object,
    *,
    horizon: int,
    action_dim: int,
    num_steps: int,
    beta: float,
    normalize: Callable[[np.ndarray], np.ndarray],
    prev_shift: object = 0,
    mode: str = "soft",
    prev_dims: int | None = None,
) -> RTCInputs | None:
    """Validate and align the previous chunk; build guidance masks and weights.

    Args:
        prev_chunk: Previous chunk ``(H, D)`` in robot units, or ``None``.
        d: Commit length (frozen keyframes).
        horizon: The model's chunk length H.
        action_dim: The robot's action dimension D.
        num_steps: Euler steps K of the model.
        beta: Guidance weight clip.
        normalize: Robot units -> model units, ``(H, D) -> (H, D)``.
        prev_shift: Keyframes of the previous chunk executed before this chunk starts.
        mode: ``"soft"`` or ``"hard"`` guidance mask.
        prev_dims: Leading action dimensions the client's chunk really has (None: all);
            the others are padding and are zero in model units, as a π0 policy's
            padded action dimensions are in training (openpi pads after normalising).

    Returns:
        The RTC inputs, or ``None`` when there is no previous chunk.

    Raises:
        CommitLengthError: If ``d`` or ``prev_shift`` is out of range.
        ChunkShapeError: If the previous chunk is not a finite ``(H, D)`` array.
        InputError: On an unknown mode.
    """
    frozen = _index(d, "d", horizon)
    if mode not in RTC_MODES:
        raise InputError("rtc_mode", f"must be 'soft' or 'hard', got {mode!r}")
    if prev_chunk is None:
        return None
    try:
        prev = np.asarray(prev_chunk, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ChunkShapeError("prev_chunk", f"not a numeric array: {exc}") from exc
    if prev.shape != (horizon, action_dim):
        raise ChunkShapeError(
            "prev_chunk", f"expected shape (H, D) = ({horizon}, {action_dim}), got {prev.shape}"
        )
    if not np.all(np.isfinite(prev)):
        raise ChunkShapeError("prev_chunk", "contains NaN or Inf")
    shift = _index(prev_shift, "prev_shift", horizon)
    if frozen > horizon - shift:
        raise CommitLengthError(
            "d", f"{frozen} exceeds the overlap H - prev_shift = {horizon - shift}"
        )
    aligned, overlap = align_previous_chunk(prev, shift)
    aligned_norm = np.asarray(normalize(aligned), dtype=np.float32)
    aligned_norm[overlap:] = 0.0
    if prev_dims is not None:
        aligned_norm[:, max(0, int(prev_dims)):] = 0.0
    weights = prefix_weights(horizon, frozen, overlap, mode)  # type: ignore[arg-type]
    return RTCInputs(
        aligned_raw=aligned,
        aligned_norm=aligned_norm,
        weights=weights.astype(np.float32),
        frozen=frozen,
        overlap=overlap,
        mode=mode,
        step_weights=guidance_weights(num_steps, beta).astype(np.float32),
    )
