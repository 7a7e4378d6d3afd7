from __future__ import annotations

import contextlib

import msgpack
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from xinfer_ros.openpi.codec import CodecError, DecodeLimits, LimitError, packb, unpackb

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


def _empty_maps(n: int) -> bytes:
    return msgpack.packb([{}] * n)


@pytest.mark.parametrize(("message", "limit"), [
    (_empty_maps(1 << 20), "elements"),              # 1 MiB on the wire, ~70 MiB decoded
    (msgpack.packb({"a": [[{}] * 15] * 4000}), "elements"),  # no single big header
    (b"\x91" * 40 + b"\xc0", "depth"),                # [[[...[nil]...]]]
    (b"\x91" * 32 + b"\x90", "depth"),                # 33 levels, the last one empty
    (msgpack.packb({"x": {b"__ndarray__": True, b"data": b"", b"dtype": "<f8",
                          b"shape": [1] * 40 + [0]}}), "array_dims"),
])
def test_amplifying_messages_are_refused_naming_the_limit(message: bytes, limit: str) -> None:
    with pytest.raises(LimitError) as info:
        unpackb(message)
    assert info.value.limit == limit


def test_element_budget_grows_with_the_message_size() -> None:
    limits = DecodeLimits(base_elements=100, bytes_per_element=10, ceiling_elements=250)
    assert limits.max_elements(0) == 100 and limits.max_elements(1000) == 200
    assert limits.max_elements(10**9) == 250
    small = msgpack.packb([0] * 150)
    with pytest.raises(LimitError, match="may hold 115 elements"):
        unpackb(small, limits)
    padded = msgpack.packb([[0] * 150, b"\0" * 1000])   # the same list in a bigger message
    assert unpackb(padded, limits)[0] == [0] * 150


def test_nesting_up_to_the_limit_decodes() -> None:
    assert unpackb(b"\x91" * 31 + b"\x90") is not None             # 32 levels


def test_realistic_observations_fit_the_default_limits() -> None:
    obs = {"observation/image": np.zeros((224, 224, 3), np.uint8),
           "observation/state": np.zeros(8), "prompt": "stack the blocks",
           # a previous chunk as nested lists (H x D floats), as a plain Python client sends
           "xinfer/prev_chunk": np.zeros((50, 32)).tolist(),
           "nested": {"a": {"b": {"c": [1, 2, 3]}}}}
    out = unpackb(packb(obs))
    assert len(out["xinfer/prev_chunk"]) == 50 and out["nested"]["a"]["b"]["c"] == [1, 2, 3]


def test_decode_limits_are_validated() -> None:
    with pytest.raises(ValueError):
        DecodeLimits(max_depth=0)


def _count(value: object, depth: int = 0) -> tuple[int, int]:
    """(elements, nesting) of a decoded value, as DecodeLimits counts them."""
    if isinstance(value, dict):
        kids = [c for kv in value.items() for c in kv]
    elif isinstance(value, list):
        kids = value
    else:
        return 1, depth
    counts = [_count(k, depth + 1) for k in kids]
    return 1 + sum(c for c, _ in counts), max([depth + 1, *(d for _, d in counts)])


_TIGHT = DecodeLimits(base_elements=12, bytes_per_element=8, max_depth=3)


@settings(max_examples=200, deadline=2000, suppress_health_check=[HealthCheck.too_slow])
@given(st.recursive(st.none() | st.booleans() | st.integers(-2**63, 2**64 - 1) | st.floats()
                    | st.text(max_size=4) | st.binary(max_size=300),
                    lambda kids: st.lists(kids, max_size=6)
                    | st.dictionaries(st.text(max_size=3), kids, max_size=6),
                    max_leaves=40))
def test_the_scan_counts_exactly_what_msgpack_builds(value: object) -> None:
    """Any msgpack value: refused exactly when it exceeds the limits, else it round-trips."""
    wire = msgpack.packb(value, use_bin_type=True)
    elements, depth = _count(value)
    over = elements > _TIGHT.max_elements(len(wire)) or depth > _TIGHT.max_depth
    try:
        out = unpackb(wire, _TIGHT)
    except LimitError:
        assert over
        return
    assert not over
    assert msgpack.packb(out, use_bin_type=True) == wire


@settings(max_examples=300, deadline=2000)
@given(st.binary(max_size=64))
def test_random_bytes_raise_only_codec_error(data: bytes) -> None:
    with contextlib.suppress(CodecError):
        unpackb(data)
