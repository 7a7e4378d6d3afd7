"""Abusive openpi clients, run as their own process against an endpoint.

Usage: python abuse_client_script.py '<json config>'; prints one JSON line mapping each
actor to the reasons (first words of the server's text frames) it was given. Config:
``uri``, ``seconds`` (or until SIGTERM), ``idle`` and ``slow`` (connection counts),
``flood`` (bool), ``amplify`` (lists of ``[payload kind, size]``, one amplifying client per list).
Running apart from the test keeps the abusers' own CPU use (building, masking and
sending 16 MiB messages) off the measuring client's interpreter.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import struct
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import websockets
from websockets.sync.client import connect

from xinfer_ros.openpi.codec import unpackb


# -- payloads ------------------------------------------------------------------------------
def _array32(count: int) -> bytes:
    return b"\xdd" + struct.pack(">I", count)


def _repeat(unit: bytes, size: int, per_group: int = 0) -> bytes:
    """About ``size`` bytes of ``unit``: one flat array, or fixarrays of ``per_group``
    units (no single header claims much: the scan has to count them)."""
    if not per_group:
        count = max(1, (size - 5) // len(unit))
        return _array32(count) + unit * count
    group = bytes([0x90 | per_group]) + unit * per_group
    count = max(1, (size - 5) // len(group))
    return _array32(count) + group * count


PAYLOADS: dict[str, Callable[[int], bytes]] = {
    "empty_maps": lambda n: _repeat(b"\x80", n),
    "grouped_empty_maps": lambda n: _repeat(b"\x80", n, per_group=15),
    "one_entry_maps": lambda n: _repeat(b"\x81\xa1a\xc0", n, per_group=15),
    "short_strings": lambda n: _repeat(b"\xa2ab", n, per_group=15),
    "floats": lambda n: _repeat(b"\xcb" + struct.pack(">d", 1.5), n, per_group=15),
    "deep": lambda n: b"\x91" * (n - 1) + b"\xc0",
    "deep_maps": lambda n: b"\x81\xa1k" * ((n - 1) // 3) + b"\xc0",
}


def send_and_expect_reason(uri: str, payload: bytes) -> str:
    """Send one abusive message; return the reason (first word of the text reply)."""
    with connect(uri, compression=None, max_size=None, open_timeout=30) as ws:
        unpackb(ws.recv(timeout=30))
        ws.send(payload)
        reply = ws.recv(timeout=60)
    return reply.split(":")[0] if isinstance(reply, str) else "<binary reply>"


@dataclass
class Abuse:
    """Abusive actors on threads; each records the reasons it was given."""

    uri: str
    stop: threading.Event = field(default_factory=threading.Event)
    reasons: dict[str, list[str]] = field(default_factory=dict)
    threads: list[threading.Thread] = field(default_factory=list)
    #: Released once per actor that got the server's greeting (its connection is open).
    connected: threading.Semaphore = field(default_factory=lambda: threading.Semaphore(0))

    def _greeted(self, _metadata: object) -> None:
        self.connected.release()

    def wait_connected(self, timeout_s: float) -> None:
        """Until every actor's connection is open (or ``timeout_s`` passed)."""
        end = time.monotonic() + timeout_s
        for _ in self.threads:
            if not self.connected.acquire(timeout=max(0.0, end - time.monotonic())):
                return

    def _actor(self, name: str, body: Callable[[list[str]], None]) -> None:
        got: list[str] = []
        self.reasons[name] = got

        def run() -> None:
            try:
                body(got)
            except websockets.ConnectionClosed as exc:
                # The server's close frame names the reason too. websockets' client
                # loses the text frame before it when it cannot answer the close (the
                # server gave up on the handshake while this process was stopped).
                if not got:
                    got.append(exc.rcvd.reason.split(":")[0] if exc.rcvd and exc.rcvd.reason
                               else f"<{type(exc).__name__}>")
            except (OSError, TimeoutError) as exc:
                if not got:  # closed before any reason: say how
                    got.append(f"<{type(exc).__name__}>")

        thread = threading.Thread(target=run, name=name, daemon=True)
        self.threads.append(thread)
        thread.start()

    def amplifier(self, name: str, payloads: list[bytes]) -> None:
        """Sends the payloads in turn on one connection, as fast as it is answered."""
        def body(got: list[str]) -> None:
            with connect(self.uri, compression=None, max_size=None) as ws:
                self._greeted(unpackb(ws.recv(timeout=30)))
                while not self.stop.is_set():
                    for payload in payloads:
                        ws.send(payload)
                        reply = ws.recv(timeout=60)
                        got.append(reply.split(":")[0] if isinstance(reply, str)
                                   else "<binary reply>")
        self._actor(name, body)

    def flooder(self, name: str) -> None:
        def body(got: list[str]) -> None:
            with connect(self.uri, compression=None) as ws:
                self._greeted(unpackb(ws.recv(timeout=30)))
                while not self.stop.is_set():
                    ws.send(b"\xc1")
                    got.append(str(ws.recv(timeout=30)).split(":")[0])
        self._actor(name, body)

    def idler(self, name: str) -> None:
        """Opens a connection and sends nothing: told idle_timeout, then closed."""
        def body(got: list[str]) -> None:
            with connect(self.uri, compression=None) as ws:
                self._greeted(unpackb(ws.recv(timeout=30)))
                got.append(str(ws.recv(timeout=60)).split(":")[0])
        self._actor(name, body)

    def trickler(self, name: str) -> None:
        """Sends a frame header and then a byte every 100 ms: never a whole message."""
        def body(got: list[str]) -> None:
            with connect(self.uri, compression=None) as ws:
                self._greeted(unpackb(ws.recv(timeout=30)))
                # Raw bytes on the socket; the connection's own reader still parses what
                # the server sends, so the reason arrives through recv(). A trickler
                # stopped (SIGSTOP) past the idle timeout resumes on a socket its reader
                # has already closed (EBADF): the reason it read is still queued.
                with contextlib.suppress(OSError):
                    ws.socket.sendall(b"\x82\xfe\x10\x00" + os.urandom(4))  # 4096 B, masked
                while True:
                    try:
                        reply = ws.recv(timeout=0.1)
                    except TimeoutError:
                        with contextlib.suppress(OSError):
                            ws.socket.sendall(b"\x00")
                        continue
                    got.append(str(reply).split(":")[0])
                    return
        self._actor(name, body)

    def join(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(90)


def main(config: dict) -> None:
    abuse = Abuse(config["uri"])
    for i, spec in enumerate(config.get("amplify", [])):
        abuse.amplifier(f"amplifier_{i}", [PAYLOADS[kind](size) for kind, size in spec])
    if config.get("flood"):
        abuse.flooder("flooder")
    for i in range(config.get("idle", 0)):
        abuse.idler(f"idle_{i}")
    for i in range(config.get("slow", 0)):
        abuse.trickler(f"slow_{i}")
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    # Only then: the test stops this process between blocks (SIGSTOP), and a handshake
    # stopped past its open_timeout would fail for a reason the server never gave.
    abuse.wait_connected(60.0)
    print("started", flush=True)
    stop.wait(config["seconds"])
    abuse.join()
    print(json.dumps(abuse.reasons), flush=True)


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
