"""Camera images for the models: decoding, letterbox resizing, pixel normalisation.

OpenCV and NumPy only (no torch), so CPU preparation workers, the openpi endpoint and
the ROS nodes share one implementation. Images are ``HxWx3`` ``uint8`` RGB arrays.

Resampling follows the convention a checkpoint was trained with (:data:`RESAMPLE_MODES`):

``area``
    OpenCV's area filter when shrinking, bilinear when enlarging (the reference
    model's, and this project's default before checkpoints chose).
``bilinear_noaa``
    Bilinear interpolation with half-pixel centres and *no* antialiasing, as lerobot's
    π0 (``resize_with_pad_torch``: ``F.interpolate(..., mode="bilinear",
    align_corners=False)``) and openpi's PyTorch path train; OpenCV's
    ``INTER_LINEAR`` computes the same (up to its 8-bit rounding).
``pil_bilinear`` / ``pil_bicubic``
    Pillow's ``Image.resize`` with ``BILINEAR`` / ``BICUBIC``: a separable filter
    whose support widens by the shrink factor (antialiasing), in Pillow's 22-bit fixed
    point with a horizontal pass rounded to 8 bits before the vertical one, so the
    result equals Pillow's. openpi's ``image_tools.resize_with_pad`` uses
    ``BILINEAR``; transformers' ``PI0ImageProcessor`` resizes with antialiased
    bicubic (torchvision, whose 8-bit antialiased path follows Pillow's filter).

With ``pad`` the non-``area`` modes use openpi's letterbox geometry (scaled side
``int(side / ratio)``, offset ``int((target − scaled) / 2)``), which lerobot copies.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Literal

import cv2
import numpy as np

from xinfer_ros.model.errors import ImageError

__all__ = [
    "RESAMPLE_MODES",
    "ImageInput",
    "Resample",
    "ResizeMode",
    "decode_image",
    "fit_image",
    "normalize_image",
    "resize_rgb",
]

ImageInput = np.ndarray | bytes | bytearray | memoryview
ResizeMode = Literal["pad", "stretch"]
Resample = Literal["area", "bilinear_noaa", "pil_bilinear", "pil_bicubic"]
#: Resampling conventions by name (preset and layout files write them).
RESAMPLE_MODES: tuple[str, ...] = ("area", "bilinear_noaa", "pil_bilinear", "pil_bicubic")

#: Pillow's fixed-point precision of 8-bit resampling (32 - 8 - 2 bits).
_PIL_PRECISION_BITS = 22


def decode_image(image: ImageInput, field: str) -> np.ndarray:
    """Return an ``HxWx3`` uint8 RGB array from an array or encoded JPEG/PNG bytes.

    Raises:
        ImageError: If bytes do not decode or the array has the wrong rank, channel
            count or dtype.
    """
    if isinstance(image, bytes | bytearray | memoryview):
        buf = np.frombuffer(bytes(image), dtype=np.uint8)
        decoded = cv2.imdecode(buf, cv2.IMREAD_COLOR) if buf.size else None
        if decoded is None:
            raise ImageError(field, "encoded image could not be decoded")
        return cv2.cvtColor(decoded, cv2.COLOR_BGR2RGB)
    if not isinstance(image, np.ndarray):
        raise ImageError(field, f"expected a numpy array or encoded bytes, got {type(image)}")
    if image.ndim != 3 or image.shape[2] != 3:
        raise ImageError(field, f"expected HxWx3 RGB channels, got shape {image.shape}")
    if image.dtype != np.uint8:
        raise ImageError(field, f"expected dtype uint8, got {image.dtype}")
    return image


def fit_image(img: np.ndarray, height: int, width: int, mode: ResizeMode = "pad",
              resample: Resample = "area") -> np.ndarray:
    """Resize ``img`` (HxWx3 uint8) to ``height`` x ``width``.

    ``pad`` scales to fit inside and centres the result on black, so the scene is not
    distorted (openpi's ``resize_with_pad``); ``stretch`` scales each axis on its own.
    ``resample`` is the filter (see the module docstring).
    """
    h, w = img.shape[:2]
    if (h, w) == (height, width):
        return img
    if resample != "area":
        if mode == "stretch":
            return resize_rgb(img, height, width, resample)
        ratio = max(w / width, h / height)
        nh, nw = max(1, int(h / ratio)), max(1, int(w / ratio))
        out = np.zeros((height, width, 3), dtype=np.uint8)
        top, left = max(0, int((height - nh) / 2)), max(0, int((width - nw) / 2))
        out[top:top + nh, left:left + nw] = resize_rgb(img, nh, nw, resample)
        return out
    if mode == "stretch":
        interp = cv2.INTER_AREA if h * w > height * width else cv2.INTER_LINEAR
        return cv2.resize(img, (width, height), interpolation=interp)
    scale = min(height / h, width / w)
    nh, nw = max(1, round(h * scale)), max(1, round(w * scale))
    interp = cv2.INTER_AREA if scale < 1.0 else cv2.INTER_LINEAR
    small = cv2.resize(img, (nw, nh), interpolation=interp)
    out = np.zeros((height, width, 3), dtype=np.uint8)
    top, left = (height - nh) // 2, (width - nw) // 2
    out[top:top + nh, left:left + nw] = small
    return out


def normalize_image(image: np.ndarray) -> np.ndarray:
    """Return ``(3, H, W)`` float32 pixels in ``[-1, 1]`` (SigLIP's mean 0.5 / std 0.5)."""
    pixels = image.astype(np.float32) * np.float32(1.0 / 127.5) - np.float32(1.0)
    return np.ascontiguousarray(pixels.transpose(2, 0, 1))


def resize_rgb(img: np.ndarray, height: int, width: int, resample: Resample) -> np.ndarray:
    """``img`` (HxWxC uint8) resized to exactly ``height`` x ``width`` with ``resample``.

    Raises:
        ValueError: On an unknown ``resample``.
    """
    h, w = img.shape[:2]
    if (h, w) == (height, width):
        return img
    if resample == "bilinear_noaa":
        return cv2.resize(img, (width, height), interpolation=cv2.INTER_LINEAR)
    if resample == "area":
        interp = cv2.INTER_AREA if h * w > height * width else cv2.INTER_LINEAR
        return cv2.resize(img, (width, height), interpolation=interp)
    if resample not in ("pil_bilinear", "pil_bicubic"):
        raise ValueError(f"resample must be one of {list(RESAMPLE_MODES)}, got {resample!r}")
    kind = resample.removeprefix("pil_")
    out = img
    # Pillow resizes horizontally first and rounds to 8 bits in between.
    if w != width:
        out = _pil_pass(out, _pil_coefficients(w, width, kind), axis=1)
    if h != height:
        out = _pil_pass(out, _pil_coefficients(h, height, kind), axis=0)
    return out


def _bilinear(x: float) -> float:
    x = abs(x)
    return 1.0 - x if x < 1.0 else 0.0


def _bicubic(x: float) -> float:
    a = -0.5  # Pillow's (and torchvision's antialiased) cubic coefficient
    x = abs(x)
    if x < 1.0:
        return ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0
    if x < 2.0:
        return (((x - 5.0) * x + 8.0) * x - 4.0) * a
    return 0.0


_FILTERS: dict[str, tuple[Callable[[float], float], float]] = {
    "bilinear": (_bilinear, 1.0), "bicubic": (_bicubic, 2.0)}


@functools.lru_cache(maxsize=64)
def _pil_coefficients(in_size: int, out_size: int, kind: str) -> np.ndarray:
    """Pillow's fixed-point weights, ``(out_size, in_size)`` float64 holding integers.

    Output pixel ``i`` is centred at ``(i + 0.5) * scale`` in input pixels; the
    filter is stretched by the shrink factor (never narrowed when enlarging), its
    weights normalised to sum 1, then rounded to :data:`_PIL_PRECISION_BITS` bits.
    """
    filt, base_support = _FILTERS[kind]
    scale = in_size / out_size
    filterscale = max(scale, 1.0)
    support = base_support * filterscale
    one = float(1 << _PIL_PRECISION_BITS)
    weights = np.zeros((out_size, in_size), dtype=np.float64)
    for i in range(out_size):
        center = (i + 0.5) * scale
        lo = max(int(center - support + 0.5), 0)
        hi = min(int(center + support + 0.5), in_size)
        taps = [filt((x - center + 0.5) / filterscale) for x in range(lo, hi)]
        total = math.fsum(taps) if len(taps) > 1 else sum(taps)
        for x, tap in zip(range(lo, hi), taps, strict=True):
            k = tap / total if total != 0.0 else tap
            weights[i, x] = math.trunc(k * one + (0.5 if k >= 0 else -0.5))
    return weights


def _pil_pass(img: np.ndarray, weights: np.ndarray, axis: int) -> np.ndarray:
    """One separable pass along ``axis`` (0: rows, 1: columns) in fixed point."""
    moved = np.moveaxis(img, axis, 0).astype(np.float64)
    flat = moved.reshape(moved.shape[0], -1)
    # Exact: integer weights times 8-bit values stay far below 2**53.
    acc = weights @ flat + float(1 << (_PIL_PRECISION_BITS - 1))
    out = np.clip(np.floor(acc / float(1 << _PIL_PRECISION_BITS)), 0, 255).astype(np.uint8)
    return np.ascontiguousarray(np.moveaxis(out.reshape(weights.shape[0], *moved.shape[1:]),
                                            0, axis))
