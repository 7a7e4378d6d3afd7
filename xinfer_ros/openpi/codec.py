"""msgpack with NumPy arrays, in the wire format of openpi's ``msgpack_numpy``.

openpi's client (``openpi_client/msgpack_numpy.py``) packs an ``np.ndarray`` as a map
``{b"__ndarray__": True, b"data": <raw bytes>, b"dtype": dtype.str, b"shape": shape}``
and an ``np.generic`` scalar as ``{b"__npgeneric__": True, b"data": item, b"dtype":
dtype.str}``; map keys are msgpack *bin* (bytes) so they cannot collide with string keys
of an observation. Object, void and complex dtypes are refused on both sides: they
would need pickle or have no portable byte layout.

This is our own implementation of that format. Decoding treats every message as
untrusted: the dtype, shape and byte count of an array are checked before any array is
built, and a malformed message raises :class:`CodecError` instead of an arbitrary
exception. Decoded arrays are read-only views of the message bytes (no copy).
"""

from __future__ import annotations

import math
from typing import Any

import msgpack
import numpy as np

from xinfer_ros.openpi.errors import OpenPIError

__all__ = ["CodecError", "packb", "unpackb"]

_ND = b"__ndarray__"
_NPG = b"__npgeneric__"
#: Kinds without a portable byte layout (object, void/structured, complex), refused as
#: openpi refuses them.
_REFUSED_KINDS = frozenset("OVc")
#: Nesting limit of decoded containers: an observation is a few levels deep; a deep
#: message is an attack on the decoder's recursion, not data.
_MAX_DEPTH = 32


class CodecError(OpenPIError, ValueError):
    """A message is not valid msgpack-numpy (or holds a value that cannot be packed)."""


def _encode(obj: Any) -> Any:
    """The msgpack ``default`` hook: arrays and NumPy scalars to their tagged maps."""
    if isinstance(obj, (np.ndarray, np.generic)) and obj.dtype.kind in _REFUSED_KINDS:
        raise CodecError(f"unsupported dtype {obj.dtype} (object, void and complex arrays "
                         "cannot be sent)")
    if isinstance(obj, np.ndarray):
        # A contiguous array goes out as a byte view: msgpack copies it once into the
        # message, where tobytes() would add a copy (and its page faults) per image.
        # tobytes() is C order whatever the strides; 0-d arrays keep shape [].
        data = (obj.reshape(-1).view(np.uint8).data if obj.flags.c_contiguous
                else obj.tobytes())
        return {_ND: True, b"data": data, b"dtype": obj.dtype.str, b"shape": list(obj.shape)}
    if isinstance(obj, np.generic):
        return {_NPG: True, b"data": obj.item(), b"dtype": obj.dtype.str}
    raise CodecError(f"cannot pack a value of type {type(obj).__name__}")


def packb(obj: Any) -> bytes:
    """Serialize ``obj`` (dicts, lists, scalars, str, bytes, NumPy arrays and scalars).

    Raises:
        CodecError: on a value msgpack-numpy cannot represent.
    """
    try:
        return msgpack.packb(obj, default=_encode, use_bin_type=True)
    except CodecError:
        raise
    except (TypeError, ValueError, OverflowError) as exc:
        raise CodecError(f"cannot pack message: {exc}") from exc


def _dtype(raw: Any) -> np.dtype:
    if isinstance(raw, bytes):
        raw = raw.decode("ascii", "replace")
    if not isinstance(raw, str):
        raise CodecError(f"array dtype must be a string, got {type(raw).__name__}")
    try:
        dtype = np.dtype(raw)
    except TypeError as exc:
        raise CodecError(f"unknown array dtype {raw!r}") from exc
    if dtype.kind in _REFUSED_KINDS or dtype.hasobject:
        raise CodecError(f"unsupported array dtype {raw!r}")
    return dtype


def _array(obj: dict[Any, Any]) -> np.ndarray:
    dtype = _dtype(obj.get(b"dtype"))
    shape = obj.get(b"shape")
    data = obj.get(b"data")
    if not isinstance(shape, (list, tuple)) or not all(
            isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in shape):
        raise CodecError(f"array shape must be a list of non-negative ints, got {shape!r}")
    if not isinstance(data, bytes):
        raise CodecError(f"array data must be bytes, got {type(data).__name__}")
    expected = math.prod(shape) * dtype.itemsize
    if len(data) != expected:
        raise CodecError(f"array of shape {tuple(shape)} and dtype {dtype.str} needs "
                         f"{expected} bytes, got {len(data)}")
    return np.frombuffer(data, dtype=dtype).reshape(tuple(shape))


def _scalar(obj: dict[Any, Any]) -> np.generic:
    dtype = _dtype(obj.get(b"dtype"))
    try:
        return dtype.type(obj.get(b"data"))
    except (TypeError, ValueError, OverflowError) as exc:
        raise CodecError(f"bad {dtype.str} scalar: {exc}") from exc


def _decode(obj: dict[Any, Any]) -> Any:
    """The msgpack ``object_hook``: tagged maps back to arrays and scalars."""
    if obj.get(_ND) is True:
        return _array(obj)
    if obj.get(_NPG) is True:
        return _scalar(obj)
    return obj


def _depth_ok(obj: Any, depth: int = 0) -> bool:
    if depth > _MAX_DEPTH:
        return False
    if isinstance(obj, dict):
        return all(_depth_ok(v, depth + 1) for v in obj.values())
    if isinstance(obj, list):
        return all(_depth_ok(v, depth + 1) for v in obj)
    return True


def unpackb(data: bytes) -> Any:
    """Deserialize one message; arrays come back as read-only NumPy arrays.

    Raises:
        CodecError: on invalid msgpack, a malformed array, or excessive nesting.
    """
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise CodecError(f"expected a binary message, got {type(data).__name__}")
    try:
        # strict_map_key (the default) admits only str and bytes keys: all openpi uses.
        obj = msgpack.unpackb(data, object_hook=_decode, raw=False)
    except CodecError:
        raise
    except (ValueError, TypeError, OverflowError, RecursionError) as exc:
        # msgpack's ExtraData, FormatError and StackError are ValueErrors.
        raise CodecError(f"not a valid msgpack message: {exc}") from exc
    if not _depth_ok(obj):
        raise CodecError(f"message nested deeper than {_MAX_DEPTH} levels")
    return obj
