"""sensor_msgs/Image to an RGB uint8 array, with or without ROS 2's cv_bridge.

ROS 2's ``cv_bridge`` is used when it imports (apt installs). Elsewhere a numpy
conversion reads the message's ``encoding``, ``step`` (row stride, which may include
padding) and ``is_bigendian`` fields itself. Both return ``(height, width, 3)`` uint8
RGB, the layout the model's preparation expects.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Protocol, TypedDict

import numpy as np
import numpy.typing as npt

from xinfer_ros.errors import XInferRosError

__all__ = ["DEPTH_ENCODINGS", "ImageConversionError", "ImageFields", "ImageLike", "check_colour",
           "image_to_rgb", "rgb_to_image_fields"]


class ImageConversionError(XInferRosError, ValueError):
    """An image message cannot be converted (encoding, size or data length)."""


class ImageLike(Protocol):
    """The fields of sensor_msgs/Image that the conversion reads."""

    height: int
    width: int
    encoding: str
    is_bigendian: int
    step: int

    @property
    def data(self) -> bytes | bytearray | memoryview | Sequence[int]:
        """The pixel rows (rclpy: an ``array.array`` of bytes)."""


class ImageFields(TypedDict):
    """The sensor_msgs/Image fields :func:`rgb_to_image_fields` fills."""

    height: int
    width: int
    encoding: str
    is_bigendian: int
    step: int
    data: bytes


class _Bridge(Protocol):
    """The part of cv_bridge's ``CvBridge`` used here."""

    def imgmsg_to_cv2(self, img_msg: ImageLike, desired_encoding: str) -> npt.ArrayLike:
        """The message's pixels as an OpenCV (numpy) image."""


# encoding -> (channels, numpy dtype, channel order as it should map to RGB)
_ENCODINGS: dict[str, tuple[int, str, str]] = {
    "rgb8": (3, "u1", "rgb"),
    "bgr8": (3, "u1", "bgr"),
    "rgba8": (4, "u1", "rgba"),
    "bgra8": (4, "u1", "bgra"),
    "mono8": (1, "u1", "mono"),
    "8UC1": (1, "u1", "mono"),
    "8UC3": (3, "u1", "bgr"),  # OpenCV's default channel order
    "mono16": (1, "u2", "mono"),
    "rgb16": (3, "u2", "rgb"),
    "bgr16": (3, "u2", "bgr"),
}


#: Depth encodings: a depth camera is not a colour camera the policy was trained on.
DEPTH_ENCODINGS = ("16UC1", "32FC1")


def _numpy_to_rgb(msg: ImageLike) -> npt.NDArray[np.uint8]:
    if msg.encoding not in _ENCODINGS:
        raise ImageConversionError(
            f"encoding {msg.encoding!r} is not supported; use one of {sorted(_ENCODINGS)}")
    channels, kind, order = _ENCODINGS[msg.encoding]
    dtype = np.dtype(kind).newbyteorder(">" if msg.is_bigendian else "<")
    if msg.height <= 0 or msg.width <= 0:
        raise ImageConversionError(f"image size {msg.width}x{msg.height} is empty")
    row_bytes = msg.width * channels * dtype.itemsize
    if msg.step < row_bytes:
        raise ImageConversionError(
            f"step {msg.step} is shorter than a row of {row_bytes} bytes ({msg.encoding})")
    buf = np.frombuffer(bytes(msg.data), dtype=np.uint8)
    # The last row need not carry its padding.
    needed = msg.step * (msg.height - 1) + row_bytes
    if buf.size < needed:
        raise ImageConversionError(
            f"image data has {buf.size} bytes, {msg.width}x{msg.height} {msg.encoding} "
            f"with step {msg.step} needs {needed} (truncated?)")
    rows = np.lib.stride_tricks.as_strided(
        buf, shape=(msg.height, row_bytes), strides=(msg.step, 1))
    pixels = np.ascontiguousarray(rows).view(dtype).reshape(msg.height, msg.width, channels)
    if dtype.itemsize == 2:
        pixels = (pixels.astype(np.uint32) >> 8).astype(np.uint8)
    else:
        pixels = pixels.astype(np.uint8, copy=False)
    if order == "mono":
        return np.repeat(pixels, 3, axis=2)
    if order.startswith("bgr"):
        return np.ascontiguousarray(pixels[:, :, 2::-1])
    return np.ascontiguousarray(pixels[:, :, :3])


@functools.cache
def _cv_bridge() -> _Bridge | None:
    # Resolved once: a failed import is not cached by Python and would search
    # sys.path again for every frame.
    try:
        from cv_bridge import CvBridge
    except ImportError:
        return None
    bridge: _Bridge = CvBridge()
    return bridge


def _cv_bridge_to_rgb(msg: ImageLike) -> npt.NDArray[np.uint8] | None:
    bridge = _cv_bridge()
    if bridge is None:
        return None
    try:
        out = bridge.imgmsg_to_cv2(msg, desired_encoding="rgb8")
    except Exception as exc:  # cv_bridge raises its own CvBridgeError
        raise ImageConversionError(f"cv_bridge: {exc}") from exc
    return np.asarray(out, dtype=np.uint8)


def image_to_rgb(msg: ImageLike, *, use_cv_bridge: bool = True) -> npt.NDArray[np.uint8]:
    """Convert an image message to ``(height, width, 3)`` uint8 RGB.

    Args:
        msg: A sensor_msgs/Image (or any object with its fields).
        use_cv_bridge: Try ROS 2's cv_bridge first when it is importable.

    Returns:
        A C-contiguous RGB array that owns its memory.

    Raises:
        ImageConversionError: On a depth or unsupported encoding, a step shorter than a
            row, or data shorter than ``height`` rows.
    """
    check_colour(msg)
    if use_cv_bridge:
        out = _cv_bridge_to_rgb(msg)
        if out is not None:
            return out
    return _numpy_to_rgb(msg)


def check_colour(msg: ImageLike) -> None:
    """Refuse a depth image before any conversion would turn it into grey.

    Raises:
        ImageConversionError: Naming the depth encoding.
    """
    if msg.encoding in DEPTH_ENCODINGS:
        raise ImageConversionError(
            f"depth image ({msg.encoding}) on a colour camera topic: the model takes RGB")


def rgb_to_image_fields(rgb: npt.NDArray[np.uint8]) -> ImageFields:
    """The sensor_msgs/Image fields for an RGB uint8 array (encoding ``rgb8``)."""
    arr = np.ascontiguousarray(rgb, dtype=np.uint8)
    if arr.ndim != 3 or arr.shape[2] != 3:
        raise ImageConversionError(f"expected (H, W, 3) uint8 RGB, got {arr.shape}")
    height, width, _ = arr.shape
    return {"height": height, "width": width, "encoding": "rgb8", "is_bigendian": 0,
            "step": width * 3, "data": arr.tobytes()}
