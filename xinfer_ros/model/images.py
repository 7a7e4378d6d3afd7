"""Camera images for the models: decoding, letterbox resizing, pixel normalisation.

OpenCV and NumPy only (no torch), so CPU preparation workers, the openpi endpoint and
the ROS nodes share one implementation. Images are ``HxWx3`` ``uint8`` RGB arrays.
"""

from __future__ import annotations

from typing import Literal

import cv2
import numpy as np

from xinfer_ros.model.errors import ImageError

__all__ = [
    "ImageInput",
    "ResizeMode",
    "decode_image",
    "fit_image",
    "normalize_image",
]

ImageInput = np.ndarray | bytes | bytearray | memoryview
ResizeMode = Literal["pad", "stretch"]


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


def fit_image(img: np.ndarray, height: int, width: int, mode: ResizeMode = "pad") -> np.ndarray:
    """Resize ``img`` (HxWx3 uint8) to ``height`` x ``width``.

    ``pad`` scales to fit inside and centres the result on black, so the scene is not
    distorted (openpi's ``resize_with_pad``); ``stretch`` scales each axis on its own.
    The area filter is used when shrinking (no aliasing), bilinear when enlarging.
    """
    h, w = img.shape[:2]
    if (h, w) == (height, width):
        return img
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
