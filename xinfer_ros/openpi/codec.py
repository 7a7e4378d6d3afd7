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

Decoding cost is bounded by the message's own size (:class:`DecodeLimits`): before
msgpack builds a single object, a scan of the headers counts the elements and the
nesting depth, so an array of a million empty maps (1 byte each on the wire, a
~100-byte Python object each once decoded) is refused as :class:`LimitError` having
cost a few microseconds per element scanned, never the objects themselves. Arrays are
zero-copy views, so their bytes are the message's bytes.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from functools import partial
from typing import TypeAlias

import msgpack
import numpy as np

from xinfer_ros.openpi.errors import OpenPIError

__all__ = ["CodecError", "DecodeLimits", "LimitError", "packb", "unpackb"]

#: A msgpack map as ``object_hook`` receives it: ``str`` keys, ``bytes`` where the
#: sender packed binary keys (the array tags).
_WireMap: TypeAlias = dict[str | bytes, object]

_ND = b"__ndarray__"
_NPG = b"__npgeneric__"
#: Kinds without a portable byte layout (object, void/structured, complex), refused as
#: openpi refuses them.
_REFUSED_KINDS = frozenset("OVc")


class CodecError(OpenPIError, ValueError):
    """A message is not valid msgpack-numpy (or holds a value that cannot be packed)."""


class LimitError(CodecError):
    """A message exceeds a decoding limit (it would cost far more than its bytes).

    Attributes:
        limit: which limit: ``"elements"``, ``"depth"`` or ``"array_dims"``.
    """

    def __init__(self, limit: str, message: str) -> None:
        super().__init__(message)
        self.limit = limit


@dataclass(frozen=True)
class DecodeLimits:
    """What one message may hold, scaled by its size.

    A decoded element costs at most ~100 bytes of Python objects (a 1-entry dict is the
    worst: 3 wire bytes, ~190 bytes decoded); with one element per
    ``bytes_per_element`` wire bytes beyond ``base_elements``, decoding costs at most
    ``100 / bytes_per_element`` times the message (1.6 by default) plus
    ``base_elements * 100`` bytes.

    Attributes:
        base_elements: elements (every map key, map value, array item and container)
            any message may hold; an observation has tens, a prev_chunk sent as nested
            lists (H x D floats) a few thousand.
        bytes_per_element: further elements allowed per this many message bytes.
        ceiling_elements: elements no message may exceed, whatever its size: scanning
            costs about a microsecond per element, so this bounds the time a maximal
            hostile message holds the interpreter (~15 ms) while images, a few elements
            each, are unaffected.
        max_depth: nesting of containers: an observation is a few levels deep; a deep
            message is an attack on recursive consumers, not data.
        max_array_dims: dimensions of one ndarray.
    """

    base_elements: int = 4096
    bytes_per_element: int = 64
    ceiling_elements: int = 1 << 14
    max_depth: int = 32
    max_array_dims: int = 32

    def __post_init__(self) -> None:
        if min(self.base_elements, self.bytes_per_element, self.ceiling_elements,
               self.max_depth, self.max_array_dims) < 1:
            raise ValueError("decode limits must be >= 1")

    def max_elements(self, size: int) -> int:
        """Elements a message of ``size`` bytes may hold."""
        return min(self.base_elements + size // self.bytes_per_element,
                   max(self.ceiling_elements, self.base_elements))


_DEFAULT_LIMITS = DecodeLimits()


def _encode(obj: object) -> dict[bytes, object]:
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


def packb(obj: object) -> bytes:
    """Serialize ``obj`` (dicts, lists, scalars, str, bytes, NumPy arrays and scalars).

    Raises:
        CodecError: on a value msgpack-numpy cannot represent.
    """
    try:
        packed: bytes = msgpack.packb(obj, default=_encode, use_bin_type=True)
    except CodecError:
        raise
    except (TypeError, ValueError, OverflowError) as exc:
        raise CodecError(f"cannot pack message: {exc}") from exc
    return packed


def _dtype(raw: object) -> np.dtype:
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


def _array(obj: _WireMap, limits: DecodeLimits) -> np.ndarray:
    dtype = _dtype(obj.get(b"dtype"))
    shape = obj.get(b"shape")
    data = obj.get(b"data")
    if isinstance(shape, (list, tuple)) and len(shape) > limits.max_array_dims:
        raise LimitError("array_dims", f"array of {len(shape)} dimensions (at most "
                         f"{limits.max_array_dims})")
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


def _scalar(obj: _WireMap) -> np.generic:
    dtype = _dtype(obj.get(b"dtype"))
    try:
        value: np.generic = dtype.type(obj.get(b"data"))
        return value
    except (TypeError, ValueError, OverflowError) as exc:
        raise CodecError(f"bad {dtype.str} scalar: {exc}") from exc


def _decode(limits: DecodeLimits, obj: _WireMap) -> np.ndarray | np.generic | _WireMap:
    """The msgpack ``object_hook``: tagged maps back to arrays and scalars."""
    if obj.get(_ND) is True:
        return _array(obj, limits)
    if obj.get(_NPG) is True:
        return _scalar(obj)
    return obj


#: Wire bytes after the type byte of fixed-size scalars (msgpack spec): nil, bool,
#: floats, ints and fixext.
_FIXED = {0xC0: 0, 0xC2: 0, 0xC3: 0, 0xCA: 4, 0xCB: 8, 0xCC: 1, 0xCD: 2, 0xCE: 4,
          0xCF: 8, 0xD0: 1, 0xD1: 2, 0xD2: 4, 0xD3: 8, 0xD4: 2, 0xD5: 3, 0xD6: 5,
          0xD7: 9, 0xD8: 17}
#: Length-prefixed payloads (str, bin, ext): type byte -> (length format, extra bytes).
_SIZED = {0xD9: (">B", 0), 0xDA: (">H", 0), 0xDB: (">I", 0), 0xC4: (">B", 0),
          0xC5: (">H", 0), 0xC6: (">I", 0), 0xC7: (">B", 1), 0xC8: (">H", 1),
          0xC9: (">I", 1)}
#: Container headers: type byte -> (count format, items per count).
_CONTAINERS = {0xDC: (">H", 1), 0xDD: (">I", 1), 0xDE: (">H", 2), 0xDF: (">I", 2)}


def _header(view: bytes | memoryview, pos: int, size: int) -> tuple[int, int] | None:
    """Read the item at ``pos``: (position after its header, items it contains).

    Items contained is -1 for a scalar (whose payload the position skips) and the
    number of child items (two per map entry) for a container. None when the header is
    truncated or invalid: msgpack reports those itself.
    """
    b = view[pos]
    pos += 1
    if b <= 0x7F or b >= 0xE0:                            # fixint
        return pos, -1
    if b <= 0x8F:                                         # fixmap
        return pos, 2 * (b & 0x0F)
    if b <= 0x9F:                                         # fixarray
        return pos, b & 0x0F
    if b <= 0xBF:                                         # fixstr
        return pos + (b & 0x1F), -1
    if b in _FIXED:
        return pos + _FIXED[b], -1
    if b in _SIZED:
        fmt, extra = _SIZED[b]
        width = struct.calcsize(fmt)
        if pos + width > size:
            return None
        return pos + width + extra + struct.unpack_from(fmt, view, pos)[0], -1
    if b in _CONTAINERS:
        fmt, per = _CONTAINERS[b]
        width = struct.calcsize(fmt)
        if pos + width > size:
            return None
        return pos + width, per * struct.unpack_from(fmt, view, pos)[0]
    return None                                           # 0xC1: never used


def _scan(data: bytes | bytearray | memoryview, limits: DecodeLimits) -> None:
    """Count elements and nesting from the headers alone; raise before msgpack builds.

    Malformed input is left to msgpack, which reports it: the scan only stops early
    (truncation, an unused type byte) and lets the decode fail with its own message.
    """
    view = memoryview(data).cast("B") if not isinstance(data, bytes) else data
    size = len(view)
    budget = limits.max_elements(size)
    pending = [1]          # items still to read at each open level (top: 1 object)
    pos = elements = 0
    while pending:
        if pending[-1] == 0:
            pending.pop()
            continue
        pending[-1] -= 1
        elements += 1
        if elements > budget:
            raise LimitError("elements", f"a {size}-byte message may hold {budget} "
                             f"elements (arrays, maps and their items); this one holds more")
        item = _header(view, pos, size) if pos < size else None
        if item is None:
            return
        pos, count = item
        if count < 0:
            continue
        if len(pending) > limits.max_depth:       # this container's own nesting level
            raise LimitError("depth", f"message nested deeper than {limits.max_depth} "
                             "levels")
        if count > budget:   # a header alone may claim more than the message holds
            raise LimitError("elements", f"a {size}-byte message may hold {budget} "
                             f"elements; a container claims {count}")
        if count:
            pending.append(count)


def unpackb(data: bytes | bytearray | memoryview,
            limits: DecodeLimits = _DEFAULT_LIMITS) -> object:
    """Deserialize one message; arrays come back as read-only NumPy arrays.

    The result is whatever the sender packed (a map for every openpi message): callers
    check its type before they read it.

    Args:
        data: the message.
        limits: what a message of its size may hold.

    Raises:
        LimitError: when the message holds more elements or nesting than its size
            allows (checked before anything is built).
        CodecError: on invalid msgpack or a malformed array.
    """
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise CodecError(f"expected a binary message, got {type(data).__name__}")
    _scan(data, limits)
    budget = limits.max_elements(len(data))
    try:
        # strict_map_key (the default) admits only str and bytes keys: all openpi uses.
        # The length caps repeat the scan's bound inside msgpack (it would otherwise
        # preallocate what a header claims, up to the message size).
        message: object = msgpack.unpackb(data, object_hook=partial(_decode, limits),
                                          raw=False, max_array_len=budget,
                                          max_map_len=budget)
    except CodecError:
        raise
    except (ValueError, TypeError, OverflowError, RecursionError) as exc:
        # msgpack's ExtraData, FormatError and StackError are ValueErrors.
        raise CodecError(f"not a valid msgpack message: {exc}") from exc
    return message
