"""Real-time chunking (RTC) prefix masks and guidance weights, in NumPy only.

Formulas follow Black, Galliker and Levine (2025), "Real-Time Execution of Action
Chunking Flow Policies" (arXiv 2506.07339). This layer must stay free of torch so that
the executor, the simulator and the scheduler can use it; the reference model in
``xinfer_ros.model`` converts the arrays it returns to tensors.

Time convention (public implementations disagree, so it is fixed here): the flow time
``tau`` runs from ``0`` (pure noise) to ``1`` (data). An Euler step is
``x <- x + (1 / K) * v(x, tau)`` with ``v`` the velocity ``data - noise``. The
guidance weight therefore diverges at both ends (``tau -> 0`` and ``tau -> 1``) and is
clipped to ``beta``. openpi's π0 uses the opposite direction (``t = 1`` noise); convert
with ``tau = 1 - t``.

Chunk indexing: a chunk has ``horizon`` keyframes ``0 .. H-1``. The previous chunk,
shifted by the number of keyframes executed since it started (``shift``), overlaps
the new chunk on indices ``0 .. H-shift-1``. The first ``frozen`` (``d``) keyframes
are committed: they execute while the new chunk is computed and must equal the
previous chunk there.
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np

__all__ = [
    "DEFAULT_BETA",
    "MaskMode",
    "align_previous_chunk",
    "guidance_weight",
    "guidance_weights",
    "hard_prefix_mask",
    "prefix_weights",
    "r_tau_squared",
    "soft_prefix_mask",
    "validate_rtc_lengths",
]

#: Default guidance weight clip (the RTC paper's beta).
DEFAULT_BETA: float = 5.0

MaskMode = Literal["soft", "hard"]


def validate_rtc_lengths(horizon: int, frozen: int, overlap: int) -> None:
    """Check that ``0 <= frozen <= overlap <= horizon`` and ``horizon >= 1``.

    Args:
        horizon: Chunk length H.
        frozen: Number of committed keyframes d.
        overlap: Number of keyframes of the new chunk covered by the previous chunk.

    Raises:
        ValueError: Naming the offending quantity.
    """
    if horizon < 1:
        raise ValueError(f"horizon must be >= 1, got {horizon}")
    if not 0 <= overlap <= horizon:
        raise ValueError(f"overlap must be in [0, horizon={horizon}], got {overlap}")
    if frozen < 0:
        raise ValueError(f"d (frozen keyframes) must be >= 0, got {frozen}")
    if frozen > horizon:
        raise ValueError(f"d (frozen keyframes) must be <= horizon={horizon}, got {frozen}")
    if frozen > overlap:
        raise ValueError(
            f"d (frozen keyframes) must be <= overlap={overlap} with the previous chunk, "
            f"got {frozen}"
        )


def hard_prefix_mask(horizon: int, frozen: int) -> np.ndarray:
    """Return the hard mask: 1 on the first ``frozen`` keyframes, 0 elsewhere.

    Args:
        horizon: Chunk length H.
        frozen: Number of committed keyframes d.

    Returns:
        Float64 array of shape ``(horizon,)``.
    """
    validate_rtc_lengths(horizon, frozen, horizon)
    weights = np.zeros(horizon, dtype=np.float64)
    weights[:frozen] = 1.0
    return weights


def soft_prefix_mask(horizon: int, frozen: int, overlap: int) -> np.ndarray:
    """Return the RTC soft mask (paper Eq. 5).

    ``W_i = 1`` for ``i < d``; ``W_i = c_i (e^{c_i} - 1) / (e - 1)`` with
    ``c_i = (overlap - i) / (overlap - d + 1)`` for ``d <= i < overlap``; ``W_i = 0``
    for ``i >= overlap``. The weight decays exponentially from just under 1 after the
    frozen prefix towards 0 at the end of the overlap, so later keyframes are free to
    react to the new observation.

    Args:
        horizon: Chunk length H.
        frozen: Number of committed keyframes d.
        overlap: ``H - s`` where ``s`` keyframes of the previous chunk were executed.

    Returns:
        Float64 array of shape ``(horizon,)`` with values in ``[0, 1]``.
    """
    validate_rtc_lengths(horizon, frozen, overlap)
    weights = np.zeros(horizon, dtype=np.float64)
    weights[:frozen] = 1.0
    idx = np.arange(frozen, overlap, dtype=np.float64)
    c = (overlap - idx) / (overlap - frozen + 1)
    weights[frozen:overlap] = c * np.expm1(c) / math.expm1(1.0)
    return weights


def prefix_weights(
    horizon: int, frozen: int, overlap: int | None = None, mode: MaskMode = "soft"
) -> np.ndarray:
    """Return the per-keyframe guidance mask for ``mode``.

    Args:
        horizon: Chunk length H.
        frozen: Number of committed keyframes d.
        overlap: Overlap with the previous chunk; ``None`` means the whole horizon.
        mode: ``"soft"`` (exponential decay over the overlap) or ``"hard"`` (first d).

    Returns:
        Float64 array of shape ``(horizon,)``.

    Raises:
        ValueError: On an unknown mode or inconsistent lengths.
    """
    overlap = horizon if overlap is None else overlap
    if mode == "soft":
        return soft_prefix_mask(horizon, frozen, overlap)
    if mode == "hard":
        validate_rtc_lengths(horizon, frozen, overlap)
        return hard_prefix_mask(horizon, frozen)
    raise ValueError(f"mode must be 'soft' or 'hard', got {mode!r}")


def r_tau_squared(tau: float) -> float:
    """Return ``r_tau^2 = (1 - tau)^2 / (tau^2 + (1 - tau)^2)``.

    Args:
        tau: Flow time in ``[0, 1]`` (0 = noise, 1 = data).

    Returns:
        The variance factor of the Gaussian posterior approximation.
    """
    _check_tau(tau)
    one_minus = 1.0 - tau
    return one_minus * one_minus / (tau * tau + one_minus * one_minus)


def guidance_weight(tau: float, beta: float = DEFAULT_BETA) -> float:
    """Return the clipped guidance weight ``min(beta, (1 - tau) / (tau * r_tau^2))``.

    Args:
        tau: Flow time in ``[0, 1]`` (0 = noise, 1 = data).
        beta: Clip value (RTC's maximum guidance weight), ``>= 0``.

    Returns:
        The guidance weight; ``beta`` where the formula diverges (``tau`` = 0 or 1).
    """
    _check_tau(tau)
    if beta < 0 or not math.isfinite(beta):
        raise ValueError(f"beta must be finite and >= 0, got {beta}")
    r2 = r_tau_squared(tau)
    if tau <= 0.0 or r2 <= 0.0:
        return float(beta)
    return float(min(beta, (1.0 - tau) / (tau * r2)))


def guidance_weights(num_steps: int, beta: float = DEFAULT_BETA) -> np.ndarray:
    """Return the guidance weight at each Euler step time ``tau_k = k / num_steps``.

    Args:
        num_steps: Number of Euler steps K (``>= 1``).
        beta: Clip value.

    Returns:
        Float64 array of shape ``(num_steps,)``.
    """
    if num_steps < 1:
        raise ValueError(f"num_steps must be >= 1, got {num_steps}")
    return np.array([guidance_weight(k / num_steps, beta) for k in range(num_steps)])


def align_previous_chunk(previous: np.ndarray, shift: int) -> tuple[np.ndarray, int]:
    """Shift the previous chunk onto the new chunk's time axis.

    Args:
        previous: Previous chunk of shape ``(H, D)``.
        shift: Keyframes of ``previous`` executed before the new chunk starts (``s``).

    Returns:
        ``(aligned, overlap)``: ``aligned[i] = previous[i + shift]`` for
        ``i < overlap = H - shift`` and zeros after (where the mask is 0 anyway).
    """
    prev = np.asarray(previous)
    if prev.ndim != 2:
        raise ValueError(f"previous chunk must have shape (H, D), got {prev.shape}")
    horizon = prev.shape[0]
    if not 0 <= shift <= horizon:
        raise ValueError(f"shift must be in [0, H={horizon}], got {shift}")
    overlap = horizon - shift
    aligned = np.zeros_like(prev)
    aligned[:overlap] = prev[shift:]
    return aligned, overlap


def _check_tau(tau: float) -> None:
    if not 0.0 <= tau <= 1.0:
        raise ValueError(f"tau must be in [0, 1], got {tau}")
