"""Bags recorded with other message definitions: decode with the bag's, map by name.

A bag stores, per connection, the full definition of its message type (rosbag2 and
MCAP both do). When that definition differs from this build's (a field added or
removed since the recording), every message of the topic is decoded with the bag's
definition and rebuilt as this build's type field by field, by name: a field this
build added takes its default (zero, empty), a field it removed is dropped. The result
is serialized again with this build's definition, so everything downstream (the scan,
the player, the golden comparison) sees this build's types only. A field whose type
changed (``uint32`` to ``float64``, one message type to another, an array to a
sequence) cannot be mapped by name: :class:`SchemaError` names it. ROS-free.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from rosbags.typesys import Stores, get_types_from_idl, get_types_from_msg, get_typestore
from rosbags.typesys.store import Typestore

from xinfer_ros.bags.reader import BagError

__all__ = ["Definition", "SchemaError", "TypeChange", "plan_translations", "rebuild"]

#: NumPy dtypes of the numeric base types (rosbags decodes their arrays as ndarrays).
_DTYPES = {"bool": np.bool_, "byte": np.uint8, "char": np.uint8, "int8": np.int8,
           "uint8": np.uint8, "int16": np.int16, "uint16": np.uint16, "int32": np.int32,
           "uint32": np.uint32, "int64": np.int64, "uint64": np.uint64,
           "float32": np.float32, "float64": np.float64}
_BASE, _NAME, _ARRAY, _SEQUENCE = 1, 2, 3, 4


class SchemaError(BagError):
    """A bag's definition of a type cannot be mapped onto this build's.

    Attributes:
        field: ``<type>.<field path>`` of the field whose type changed.
    """

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class Definition:
    """A message definition as a bag stores it.

    Attributes:
        encoding: ``ros2msg`` or ``ros2idl``.
        text: The definition with its dependencies, in rosbag2's concatenated form.
    """

    encoding: str
    text: str


@dataclass(frozen=True)
class TypeChange:
    """How the bag's definition of a type differs from this build's.

    Attributes:
        msgtype: The type (``pkg/msg/Name``).
        added: Fields only this build has (dotted paths into nested types); they take
            their defaults.
        removed: Fields only the bag has; dropped.
    """

    msgtype: str
    added: tuple[str, ...]
    removed: tuple[str, ...]

    def describe(self) -> str:
        """One line for the report."""
        parts = []
        if self.added:
            parts.append("new in this build (default values): " + ", ".join(self.added))
        if self.removed:
            parts.append("no longer in this build (dropped): " + ", ".join(self.removed))
        return (f"{self.msgtype}: the bag's definition differs from this build's; decoded "
                "with the bag's and mapped by field name; " + "; ".join(parts))

    def to_dict(self) -> dict[str, object]:
        """JSON-ready form."""
        return {"type": self.msgtype, "added": list(self.added), "removed": list(self.removed)}


def _bag_store(msgtype: str, definition: Definition) -> Typestore:
    """A typestore holding only what the bag's definition of ``msgtype`` declares."""
    store = get_typestore(Stores.EMPTY)
    if definition.encoding == "ros2idl":
        store.register(get_types_from_idl(definition.text))
    else:
        store.register(get_types_from_msg(definition.text, msgtype))
    return store


def _describe(desc: Any) -> str:
    node, arg = desc
    if node == _BASE:
        return str(arg[0]) + (f"<={arg[1]}" if arg[1] else "")
    if node == _NAME:
        return str(arg)
    sub, size = arg
    if node == _ARRAY:
        return f"{_describe(sub)}[{size}]"
    return f"{_describe(sub)}[{f'<={size}' if size else ''}]"


def _shape(desc: Any) -> Any:
    """The field's type, nested message types by name only (compared on their own)."""
    node, arg = desc
    if node in (_ARRAY, _SEQUENCE):
        return (node, _shape(arg[0]), arg[1])
    return (node, arg)


def _nested(desc: Any) -> str | None:
    """The message type a field holds (alone or in an array), if any."""
    node, arg = desc
    if node == _NAME:
        return str(arg)
    if node in (_ARRAY, _SEQUENCE):
        return _nested(arg[0])
    return None


class _Diff:
    """Fields added and removed between the bag's and this build's type, recursively."""

    def __init__(self, bag: Typestore, build: Typestore) -> None:
        self.bag = bag
        self.build = build
        self.added: list[str] = []
        self.removed: list[str] = []
        self._seen: set[str] = set()

    def walk(self, msgtype: str, prefix: str = "") -> None:
        """Compare ``msgtype`` (raises :class:`SchemaError` on a changed field type)."""
        if msgtype in self._seen or msgtype not in self.bag.fielddefs:
            return
        self._seen.add(msgtype)
        if msgtype not in self.build.fielddefs:
            raise SchemaError(msgtype, f"{msgtype}: the bag's type is unknown to this build")
        theirs = dict(self.bag.fielddefs[msgtype][1])
        ours = dict(self.build.fielddefs[msgtype][1])
        for name, desc in ours.items():
            path = f"{prefix}{name}"
            if name not in theirs:
                self.added.append(path)
                continue
            if _shape(theirs[name]) != _shape(desc):
                raise SchemaError(f"{msgtype}.{name}",
                                  f"field {path!r} of {msgtype} is {_describe(theirs[name])} "
                                  f"in the bag but {_describe(desc)} in this build: a changed "
                                  "type cannot be mapped by name")
            nested = _nested(desc)
            if nested is not None:
                self.walk(nested, f"{path}.")
        self.removed += [f"{prefix}{name}" for name in theirs if name not in ours]


def _default(build: Typestore, desc: Any) -> Any:
    node, arg = desc
    if node == _BASE:
        kind = arg[0]
        if kind in {"string", "wstring"}:
            return ""
        return np.zeros((), _DTYPES[kind]).item() if kind in _DTYPES else 0
    if node == _NAME:
        return _build_default(build, str(arg))
    sub, size = arg
    count = size if node == _ARRAY else 0
    if sub[0] == _BASE and sub[1][0] in _DTYPES:
        return np.zeros(count, _DTYPES[sub[1][0]])
    return [_default(build, sub) for _ in range(count)]


def _build_default(build: Typestore, msgtype: str) -> Any:
    fields = build.fielddefs[msgtype][1]
    return build.types[msgtype](**{name: _default(build, desc) for name, desc in fields})


def rebuild(build: Typestore, msgtype: str, value: Any) -> Any:
    """``value`` (a message of another definition of ``msgtype``) as ``build``'s type.

    Fields are taken by name; fields ``value`` lacks take their defaults, fields
    ``build``'s type lacks are dropped. Field types are assumed compatible (checked by
    :func:`plan_translations`).
    """
    kwargs = {}
    for name, desc in build.fielddefs[msgtype][1]:
        if not hasattr(value, name):
            kwargs[name] = _default(build, desc)
            continue
        field = getattr(value, name)
        nested = _nested(desc)
        if nested is None:
            kwargs[name] = field
        elif desc[0] == _NAME:
            kwargs[name] = rebuild(build, nested, field)
        else:
            kwargs[name] = [rebuild(build, nested, item) for item in field]
    return build.types[msgtype](**kwargs)


def _translator(bag: Typestore, build: Typestore, msgtype: str) -> Callable[[bytes], bytes]:
    def translate(data: bytes) -> bytes:
        msg = bag.deserialize_cdr(data, msgtype)
        return bytes(build.serialize_cdr(rebuild(build, msgtype, msg), msgtype))
    return translate


def plan_translations(types: dict[str, str], definitions: dict[str, Definition],
                      build: Typestore, warnings: list[str]
                      ) -> tuple[dict[str, Callable[[bytes], bytes]], list[TypeChange]]:
    """Translators for the topics whose stored definition differs from this build's.

    Args:
        types: Topic -> message type, for the topics to read.
        definitions: Topic -> the definition the bag stores (topics without one are
            decoded with this build's definition, as before).
        build: This build's typestore.
        warnings: Receives a note per definition that cannot be read.

    Returns:
        Per topic, a function from the bag's CDR bytes to this build's; and each type
        that differs, once.

    Raises:
        SchemaError: When a field changed type, naming it.
    """
    translators: dict[str, Callable[[bytes], bytes]] = {}
    changes: dict[str, TypeChange] = {}
    for topic, msgtype in sorted(types.items()):
        definition = definitions.get(topic)
        if definition is None or not definition.text.strip() or msgtype not in build.fielddefs:
            continue
        try:
            bag = _bag_store(msgtype, definition)
        except Exception as exc:  # rosbags' parser errors have no common base
            warnings.append(f"{topic}: the bag's definition of {msgtype} cannot be parsed "
                            f"({type(exc).__name__}: {exc}); decoding with this build's")
            continue
        diff = _Diff(bag, build)
        diff.walk(msgtype)
        if not diff.added and not diff.removed:
            continue
        translators[topic] = _translator(bag, build, msgtype)
        changes.setdefault(msgtype, TypeChange(msgtype, tuple(diff.added),
                                               tuple(diff.removed)))
    return translators, [changes[k] for k in sorted(changes)]
