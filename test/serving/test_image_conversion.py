from types import SimpleNamespace

import numpy as np
import pytest

from xinfer_ros.serving.image_conversion import (
    ImageConversionError,
    image_to_rgb,
    rgb_to_image_fields,
)

RNG = np.random.default_rng(0)


def msg(pixels: np.ndarray, encoding: str, pad: int = 0, bigendian: bool = False):
    h, w = pixels.shape[:2]
    rows = np.ascontiguousarray(pixels).reshape(h, -1).view(np.uint8)
    padded = np.zeros((h, rows.shape[1] + pad), dtype=np.uint8)
    padded[:, : rows.shape[1]] = rows
    return SimpleNamespace(height=h, width=w, encoding=encoding, is_bigendian=int(bigendian),
                           step=padded.shape[1], data=padded.tobytes())


def convert(m):
    return image_to_rgb(m, use_cv_bridge=False)


def test_rgb8_roundtrip_and_row_padding() -> None:
    rgb = RNG.integers(0, 256, (224, 352, 3), dtype=np.uint8)
    np.testing.assert_array_equal(convert(SimpleNamespace(**rgb_to_image_fields(rgb))), rgb)
    np.testing.assert_array_equal(convert(msg(rgb, "rgb8", pad=5)), rgb)


def test_bgr_bgra_and_mono_map_to_rgb() -> None:
    rgb = RNG.integers(0, 256, (8, 6, 3), dtype=np.uint8)
    np.testing.assert_array_equal(convert(msg(rgb[:, :, ::-1].copy(), "bgr8")), rgb)
    bgra = np.concatenate([rgb[:, :, ::-1], np.full((8, 6, 1), 255, np.uint8)], axis=2)
    np.testing.assert_array_equal(convert(msg(bgra, "bgra8")), rgb)
    gray = RNG.integers(0, 256, (8, 6, 1), dtype=np.uint8)
    out = convert(msg(gray, "mono8"))
    assert out.shape == (8, 6, 3) and np.all(out[:, :, 1] == gray[:, :, 0])


def test_sixteen_bit_honours_endianness() -> None:
    values = np.array([[[0x1234], [0xFF00]]], dtype=np.uint16)  # 1x2 mono16
    little = msg(values.astype("<u2"), "mono16")
    big = msg(values.astype(">u2"), "mono16", bigendian=True)
    assert convert(little)[0, :, 0].tolist() == [0x12, 0xFF]
    assert convert(big)[0, :, 0].tolist() == [0x12, 0xFF]


def test_bad_images_raise_clear_errors() -> None:
    rgb = RNG.integers(0, 256, (4, 4, 3), dtype=np.uint8)
    truncated = msg(rgb, "rgb8")
    truncated.data = truncated.data[:-7]
    with pytest.raises(ImageConversionError, match="truncated"):
        convert(truncated)
    with pytest.raises(ImageConversionError, match="encoding 'yuv422'"):
        convert(msg(rgb, "yuv422"))
    short = msg(rgb, "rgb8")
    short.step = 5
    with pytest.raises(ImageConversionError, match="step 5"):
        convert(short)
    with pytest.raises(ImageConversionError, match="expected"):
        rgb_to_image_fields(np.zeros((4, 4), np.uint8))
