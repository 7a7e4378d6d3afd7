from __future__ import annotations

import msgpack
import numpy as np
import pytest

from xinfer_ros.openpi.codec import CodecError, packb, unpackb

DTYPES = ["uint8", "int8", "int16", "int32", "int64", "uint16", "uint32", "uint64",
          "float16", "float32", "float64", "bool", ">f4", ">i8"]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(), (0,), (5,), (3, 4), (2, 3, 4), (16, 14)])
def test_arrays_round_trip(dtype: str, shape: tuple[int, ...]) -> None:
    rng = np.random.default_rng(0)
    arr = (rng.uniform(-100, 100, shape) if shape else np.float64(3.5)).astype(dtype)
    arr = np.asarray(arr)
    out = unpackb(packb({"x": arr}))["x"]
    assert isinstance(out, np.ndarray)
    assert out.dtype == arr.dtype and out.shape == arr.shape
    np.testing.assert_array_equal(out, arr)


def test_non_contiguous_and_nested() -> None:
    base = np.arange(24, dtype=np.float32).reshape(4, 6)
    msg = {"a": base[:, ::2], "b": {"c": [base.T, 1, "s", None, True]}, "d": b"raw"}
    out = unpackb(packb(msg))
    np.testing.assert_array_equal(out["a"], base[:, ::2])
    np.testing.assert_array_equal(out["b"]["c"][0], base.T)
    assert out["b"]["c"][1:] == [1, "s", None, True]
    assert out["d"] == b"raw"


@pytest.mark.parametrize("value", [np.float32(1.5), np.int64(-7), np.bool_(True), np.uint8(200)])
def test_numpy_scalars_round_trip(value: np.generic) -> None:
    out = unpackb(packb({"v": value}))["v"]
    assert type(out) is type(value) and out == value


def test_wire_format_is_openpis() -> None:
    """Decode a message built by hand in openpi's msgpack_numpy format."""
    arr = np.arange(6, dtype="<f4").reshape(2, 3)
    wire = msgpack.packb({"actions": {b"__ndarray__": True, b"data": arr.tobytes(),
                                      b"dtype": arr.dtype.str, b"shape": (2, 3)},
                          "t": {b"__npgeneric__": True, b"data": 2.5, b"dtype": "<f8"}})
    out = unpackb(wire)
    np.testing.assert_array_equal(out["actions"], arr)
    assert out["t"] == np.float64(2.5)
    # And our encoding uses the same tags, readable by a plain object_hook.
    raw = msgpack.unpackb(packb({"a": arr}))["a"]
    assert raw[b"__ndarray__"] is True and raw[b"dtype"] == "<f4" and raw[b"shape"] == [2, 3]


@pytest.mark.parametrize("value", [np.array([object()], dtype=object),
                                   np.zeros(2, dtype=np.complex64), object()])
def test_unsupported_values_refused(value: object) -> None:
    with pytest.raises(CodecError):
        packb({"x": value})


def _array_map(**over: object) -> bytes:
    m = {b"__ndarray__": True, b"data": b"\0" * 8, b"dtype": "<f8", b"shape": [1]}
    m.update({k.encode(): v for k, v in over.items()})
    return msgpack.packb({"x": m})


@pytest.mark.parametrize("message", [
    b"\xc1", b"", b"\x92\x01",                              # invalid / truncated msgpack
    _array_map(data=b"\0" * 7),                             # byte count != shape * itemsize
    _array_map(shape=[-1]), _array_map(shape="1"), _array_map(shape=[1.5]),
    _array_map(dtype="|O"), _array_map(dtype="nonsense"), _array_map(dtype=7),
    _array_map(data="text"),
    msgpack.packb({"x": {b"__npgeneric__": True, b"data": "zz", b"dtype": "<f8"}}),
])
def test_malformed_messages_raise_codec_error(message: bytes) -> None:
    with pytest.raises(CodecError):
        unpackb(message)


def test_deep_nesting_refused() -> None:
    obj: object = 1
    for _ in range(40):
        obj = [obj]
    with pytest.raises(CodecError, match="nested"):
        unpackb(msgpack.packb(obj))


def test_decoded_arrays_are_read_only_views() -> None:
    out = unpackb(packb({"x": np.ones(3)}))["x"]
    assert not out.flags.writeable
