"""Reading fleet bags defensively: what is readable is used, the rest is reported.

:func:`open_bag` opens a rosbag2 directory (MCAP or sqlite3) with ``rosbags``. When
that fails on an MCAP bag (no ``metadata.yaml`` because the recorder was killed, a
truncated file without footer or index, a corrupt chunk), a linear *salvage* scan reads
the file record by record from the start and keeps every complete chunk and message
before the damage. Every message is decoded once with the rosbags typestore (pure
Python, so garbage raises an exception instead of crashing a process); messages that do
not decode are skipped and counted. ROS-free.
"""

from __future__ import annotations

import struct
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from io import BytesIO
from pathlib import Path
from typing import Any

from rosbags.rosbag2 import Reader

from xinfer_ros.errors import XInferRosError

__all__ = ["BagError", "BagMessage", "BagSource", "open_bag"]

_MAGIC = b"\x89MCAP0\r\n"
_OP_SCHEMA, _OP_CHANNEL, _OP_MESSAGE, _OP_CHUNK, _OP_FOOTER = 0x03, 0x04, 0x05, 0x06, 0x02
#: Largest record the salvage scan believes; a longer length field is corruption.
_MAX_RECORD = 1 << 31


class BagError(XInferRosError, RuntimeError):
    """The bag cannot be read at all; the message says why."""


@dataclass(frozen=True)
class BagMessage:
    """One raw message of a bag.

    Attributes:
        topic: Topic name.
        msgtype: ROS 2 type name (``pkg/msg/Name``).
        timestamp: Receive (log) time, ns since the epoch.
        data: CDR bytes as a ROS 2 publisher sends them.
    """

    topic: str
    msgtype: str
    timestamp: int
    data: bytes


@dataclass
class _Connection:
    topic: str
    msgtype: str
    digest: str = ""
    encoding: str = ""
    definition: str = ""


@dataclass
class BagSource:
    """A readable bag and the record of what could not be read.

    Attributes:
        path: The bag directory (or MCAP file).
        storage: ``mcap`` or ``sqlite3``.
        topics: Topic name -> type name, for every connection found.
        digests: Topic name -> RIHS01 type hash stored with the connection ("" if none).
        salvaged: Whether the salvage scan replaced the rosbags reader.
        warnings: Human-readable notes on damage or oddities.
        read_error: Why reading stopped early, or ``None`` when the whole bag was read.
        skipped: Per topic, messages that could not be decoded.
        damage: Damaged parts the salvage scan skipped (set while iterating).
        definitions: Topic -> (encoding, text) of the message definition stored with
            its connection (absent when the bag stores none).
        translators: Topic -> function from the bag's CDR bytes to this build's, for
            topics recorded with another definition (see
            :mod:`xinfer_ros.bags.schema`); :meth:`messages` applies them.
    """

    path: Path
    storage: str
    topics: dict[str, str]
    digests: dict[str, str] = field(default_factory=dict)
    salvaged: bool = False
    warnings: list[str] = field(default_factory=list)
    read_error: str | None = None
    skipped: Counter[str] = field(default_factory=Counter)
    damage: list[str] = field(default_factory=list)
    definitions: dict[str, tuple[str, str]] = field(default_factory=dict)
    translators: dict[str, Callable[[bytes], bytes]] = field(default_factory=dict)
    _mcap: Path | None = None

    def salvage(self) -> BagSource | None:
        """A copy of this source that reads by the linear MCAP scan (``None``: not MCAP).

        The rosbags reader stops at the first damaged chunk; the scan skips a chunk
        it cannot decode and goes on with the next.
        """
        if self._mcap is None or self.salvaged:
            return None
        return BagSource(self.path, "mcap", dict(self.topics), dict(self.digests),
                         salvaged=True, warnings=list(self.warnings),
                         definitions=dict(self.definitions),
                         translators=dict(self.translators), _mcap=self._mcap)

    def messages(self, topics: set[str] | None = None) -> Iterator[BagMessage]:
        """The messages of ``topics`` (default all) in time order.

        A read error ends the iteration and is kept in :attr:`read_error`; it never
        propagates, so a damaged tail costs only the messages after the damage. A
        message of a topic with a translator comes in this build's definition; one the
        bag's own definition cannot decode either comes unchanged (and fails to decode
        downstream, where it is counted).
        """
        source = self._salvage_messages() if self.salvaged else self._reader_messages()
        try:
            for msg in source:
                if topics is None or msg.topic in topics:
                    yield self._translated(msg)
        except Exception as exc:
            self.read_error = f"reading stopped early: {type(exc).__name__}: {exc}"

    def _translated(self, msg: BagMessage) -> BagMessage:
        translate = self.translators.get(msg.topic)
        if translate is None:
            return msg
        try:
            return BagMessage(msg.topic, msg.msgtype, msg.timestamp, translate(msg.data))
        except Exception:  # garbage: rosbags' decoder raises anything
            return msg

    def _reader_messages(self) -> Iterator[BagMessage]:
        with Reader(self.path) as reader:
            for conn, timestamp, data in reader.messages():
                yield BagMessage(conn.topic, conn.msgtype, timestamp, bytes(data))

    def _salvage_messages(self) -> Iterator[BagMessage]:
        assert self._mcap is not None
        scan = _McapScan(self._mcap)
        yield from scan.messages()
        self.damage = list(scan.damage)
        if scan.error:
            self.read_error = scan.error


def _find_mcap(path: Path) -> Path | None:
    if path.is_file() and path.suffix == ".mcap":
        return path
    if path.is_dir():
        found = sorted(path.glob("*.mcap"))
        return found[0] if found else None
    return None


#: rosbags' definition formats by the encoding names MCAP uses for them.
_ENCODINGS = {"MSG": "ros2msg", "IDL": "ros2idl"}


def _definitions(conns: Iterator[_Connection]) -> dict[str, tuple[str, str]]:
    return {c.topic: (c.encoding, c.definition) for c in conns
            if c.encoding in _ENCODINGS.values() and c.definition.strip()}


def open_bag(path: Path | str) -> BagSource:
    """Open a bag for reading, salvaging a damaged MCAP file where possible.

    Args:
        path: A rosbag2 directory, or an MCAP file.

    Returns:
        The source; inspect ``warnings`` and, after iterating, ``read_error``.

    Raises:
        BagError: When nothing of the bag is readable, with the reason.
    """
    path = Path(path)
    if not path.exists():
        raise BagError(f"{path}: no such bag")
    mcap = _find_mcap(path)
    first_error: str | None = None
    if path.is_dir():
        try:
            with Reader(path) as reader:
                listed = [_Connection(c.topic, c.msgtype, c.digest or "",
                                      _ENCODINGS.get(c.msgdef.format.name, ""), c.msgdef.data)
                          for c in reader.connections]
                storage = "mcap" if mcap is not None else "sqlite3"
            source = BagSource(path, storage, {c.topic: c.msgtype for c in listed},
                               {c.topic: c.digest for c in listed},
                               definitions=_definitions(iter(listed)), _mcap=mcap)
            return source
        except Exception as exc:
            first_error = f"{type(exc).__name__}: {exc}"
    if mcap is None:
        raise BagError(f"{path}: not a readable rosbag2 bag ({first_error or 'no bag files'})")
    scan = _McapScan(mcap)
    conns = scan.connections()
    if not conns:
        raise BagError(f"{path}: not a readable bag: {first_error or scan.error}; "
                       f"salvage found no topics ({scan.error or 'empty'})")
    source = BagSource(path, "mcap", {c.topic: c.msgtype for c in conns.values()},
                       {c.topic: c.digest for c in conns.values()}, salvaged=True,
                       definitions=_definitions(iter(conns.values())), _mcap=mcap)
    if first_error is None:
        source.warnings.append(f"{mcap.name} is a bare MCAP file (no rosbag2 directory); "
                               "reading it by a linear scan")
    else:
        source.warnings.append(f"bag is damaged ({first_error}); salvaging {mcap.name} by a "
                               "linear scan: what is readable is used, damage is reported")
    return source


class _McapScan:
    """A linear scan of an MCAP file that stops at the first unreadable record.

    It needs neither the summary section nor the footer, which a killed writer never
    wrote. Chunks that fail to decompress are skipped; framing damage ends the scan.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.error: str | None = None
        self.damage: list[str] = []
        self._schemas: dict[int, tuple[str, str, str]] = {}
        self._channels: dict[int, _Connection] = {}

    def connections(self) -> dict[int, _Connection]:
        """Every channel found before the damage (scans the whole readable file)."""
        for _ in self.messages():
            pass
        return self._channels

    def messages(self) -> Iterator[BagMessage]:
        """Messages in file order (time order inside each chunk)."""
        self.error = None
        self.damage = []
        try:
            with self.path.open("rb") as bio:
                if bio.read(8) != _MAGIC:
                    self.error = "not an MCAP file (bad magic)"
                    return
                yield from self._records(bio, top_level=True)
        except OSError as exc:
            self.error = f"cannot read {self.path}: {exc}"

    def _records(self, bio: Any, top_level: bool) -> Iterator[BagMessage]:
        while True:
            offset = bio.tell()
            head = bio.read(9)
            if not head:
                if top_level:
                    self.error = f"file ends at byte {offset} without an MCAP footer"
                return
            framed = _read_record(bio, head, offset)
            if isinstance(framed, str):
                if not top_level:
                    raise ValueError(framed)
                self.error = framed
                return
            op, body = framed
            if op == _OP_FOOTER and top_level:
                return
            try:
                yield from self._record(op, body, offset)
            except (struct.error, UnicodeDecodeError, ValueError, KeyError) as exc:
                if not top_level:
                    raise
                self.error = f"malformed record (op {op:#x}) at byte {offset}: {exc}"
                return

    def _record(self, op: int, body: bytes, offset: int) -> Iterator[BagMessage]:
        if op == _OP_SCHEMA:
            sid, = struct.unpack_from("<H", body)
            name, pos = _string(body, 2)
            encoding, pos = _string(body, pos)
            text, pos = _string(body, pos)
            self._schemas[sid] = (name, encoding, text)
        elif op == _OP_CHANNEL:
            cid, sid = struct.unpack_from("<HH", body)
            topic, pos = _string(body, 4)
            name, encoding, text = self._schemas.get(sid, ("", "", ""))
            self._channels[cid] = _Connection(topic, name, encoding=encoding, definition=text)
        elif op == _OP_MESSAGE:
            cid, _, log_time, _ = struct.unpack_from("<HIQQ", body)
            conn = self._channels.get(cid)
            if conn is not None:
                yield BagMessage(conn.topic, conn.msgtype, log_time, body[22:])
        elif op == _OP_CHUNK:
            yield from self._chunk(body, offset)

    def _chunk(self, body: bytes, offset: int) -> Iterator[BagMessage]:
        from rosbags.rosbag2.storage_mcap import decompress

        size, = struct.unpack_from("<Q", body, 16)
        compression, pos = _string(body, 28)
        clen, = struct.unpack_from("<Q", body, pos)
        try:
            # CRC 0: rosbags' writer stores none; a corrupt payload shows when decoding.
            raw = decompress(body[pos + 8:pos + 8 + clen], compression, size, 0)
        except Exception as exc:
            self.damage.append(f"chunk at byte {offset} skipped: {exc}")
            return
        found: list[BagMessage] = []
        try:
            for msg in self._records(BytesIO(raw), top_level=False):
                found.append(msg)
        except (struct.error, UnicodeDecodeError, ValueError, KeyError) as exc:
            # Keep the messages before the damage inside this chunk.
            self.damage.append(f"chunk at byte {offset} damaged after {len(found)} "
                               f"message(s), rest skipped: {exc}")
        yield from sorted(found, key=lambda m: m.timestamp)


def _read_record(bio: Any, head: bytes, offset: int) -> tuple[int, bytes] | str:
    """Read the body of the record whose header ``head`` starts at ``offset``.

    Returns ``(opcode, body)``, or why the record's framing is broken.
    """
    if len(head) < 9:
        return f"truncated record header at byte {offset}"
    op, length = head[0], struct.unpack("<Q", head[1:])[0]
    if length > _MAX_RECORD:
        return f"implausible record length {length} at byte {offset}"
    body = bio.read(length)
    if len(body) < length:
        return f"record at byte {offset} truncated ({len(body)} of {length} bytes)"
    return op, body


def _string(body: bytes, pos: int) -> tuple[str, int]:
    n, = struct.unpack_from("<I", body, pos)
    end = pos + 4 + n
    if end > len(body):
        raise ValueError("string runs past the record")
    return body[pos + 4:end].decode(), end

