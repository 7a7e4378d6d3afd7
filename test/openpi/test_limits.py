"""What one client may cost the endpoint: decode limits, idle timeout, connection limit,
rate limit; every refusal answered with a reason and counted in ``/stats``."""

from __future__ import annotations

import contextlib
import json
import os
import struct
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import msgpack
import numpy as np
import pytest
import websockets
from websockets.sync.client import ClientConnection, connect

from xinfer_ros.openpi.client import OpenPIClient
from xinfer_ros.openpi.codec import packb, unpackb

pytestmark = pytest.mark.timeout(60)

SMALL = {"observation/image": np.zeros((32, 32, 3), np.uint8),
         "observation/wrist_image": np.zeros((32, 32, 3), np.uint8),
         "observation/state": np.zeros(8), "prompt": "x"}


def uri(server: Any) -> str:
    return f"ws://127.0.0.1:{server.port}"


def refused(server: Any) -> dict[str, int]:
    with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/stats", timeout=5) as resp:
        counts: dict[str, int] = json.loads(resp.read())["refused"]
    return counts


@contextlib.contextmanager
def opened(server: Any) -> Iterator[ClientConnection]:
    """A raw connection, past the metadata message."""
    with connect(uri(server), compression=None, max_size=None) as ws:
        unpackb(ws.recv(timeout=5))
        yield ws


def test_amplifying_messages_get_a_reason_and_the_connection_stays_usable(
        start_server: Any, engine: Any) -> None:
    server = start_server()
    with opened(server) as ws:
        for bad in (msgpack.packb([{}] * (1 << 20)),         # 1 MiB of empty maps
                    msgpack.packb({"a": [[{}] * 15] * 8000}),
                    b"\x91" * 100 + b"\xc0"):
            ws.send(bad)
            reply = ws.recv(timeout=10)
            assert isinstance(reply, str) and reply.startswith("message_limit: "), reply
            assert "connection stays open" in reply
        ws.send(packb(SMALL))
        assert unpackb(ws.recv(timeout=10))["actions"].shape == (16, 7)
    assert refused(server) == {"message_limit_elements": 2, "message_limit_depth": 1}
    assert len(engine.robots) == 1


def test_an_idle_connection_is_told_and_closed(start_server: Any) -> None:
    server = start_server(idle_timeout_s=0.5)
    with opened(server) as ws:
        ws.send(packb(SMALL))                 # a served request resets nothing wrongly
        assert unpackb(ws.recv(timeout=10))["actions"].shape == (16, 7)
        reply = ws.recv(timeout=5)
        assert isinstance(reply, str) and reply.startswith("idle_timeout: no complete "
                                                           "message in 0.5 s"), reply
        with pytest.raises(websockets.ConnectionClosed) as info:
            ws.recv(timeout=5)
    assert info.value.rcvd is not None and info.value.rcvd.code == 1008
    assert refused(server) == {"idle_timeout": 1}


def _masked_frame_head(payload_len: int, mask: bytes) -> bytes:
    """A client's binary frame header (FIN, opcode 2, masked, 16-bit length)."""
    return bytes([0x82, 0x80 | 126]) + struct.pack(">H", payload_len) + mask


def test_a_message_trickled_in_slowly_is_cut_off_with_a_reason(start_server: Any) -> None:
    server = start_server(idle_timeout_s=1.0)
    with opened(server) as ws:
        payload, mask = packb(SMALL), os.urandom(4)
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        ws.socket.sendall(_masked_frame_head(len(payload), mask) + masked[:100])
        started = time.monotonic()
        for i in range(100, 400, 10):         # 10 bytes every 50 ms: never complete
            try:
                ws.socket.sendall(masked[i:i + 10])
            except OSError:
                break
            time.sleep(0.05)
        reply = ws.recv(timeout=5)
        assert isinstance(reply, str) and reply.startswith("idle_timeout: "), reply
        assert time.monotonic() - started < 3.0
    assert refused(server) == {"idle_timeout": 1}


def test_idle_connections_free_their_slots_for_new_clients(start_server: Any) -> None:
    server = start_server(max_connections=2, idle_timeout_s=1.0)
    with opened(server), opened(server):
        with pytest.raises(websockets.InvalidStatus) as info:
            OpenPIClient(uri(server))
        response = info.value.response
        assert response.status_code == 503
        assert b"max_connections" in response.body
        time.sleep(1.5)                       # the idle ones are closed
        with OpenPIClient(uri(server)) as client:
            assert client.infer(SMALL)["actions"].shape == (16, 7)
    assert refused(server) == {"connection_limit": 1, "idle_timeout": 2}


def test_a_flood_is_refused_and_then_held_to_the_rate(start_server: Any) -> None:
    server = start_server(rate_limit_hz=4.0, rate_burst=3)
    with opened(server) as ws:
        started = time.monotonic()
        for _ in range(9):
            ws.send(b"\xc1")                  # invalid: answered at once when read
        replies = [ws.recv(timeout=10) for _ in range(9)]
        elapsed = time.monotonic() - started
        kinds = [str(r).split(":")[0] for r in replies]
        assert kinds[:4] == ["invalid_message"] * 3 + ["rate_limited"], replies
        assert "more than 4 messages/s (3 back to back)" in replies[3]
        # After a refusal nothing is read until the refused message is paid for: the
        # flood is read at the rate (a pause after each refusal but the last), not
        # answered as fast as it arrives, and nothing beyond the burst is served while
        # it keeps flooding.
        assert kinds == ["invalid_message"] * 3 + ["rate_limited"] * 6, kinds
        assert elapsed >= 5 / 4.0 * 0.9, elapsed
        time.sleep(1.0)                       # below the rate again: served
        ws.send(packb(SMALL))
        assert unpackb(ws.recv(timeout=10))["actions"].shape == (16, 7)
    counts = refused(server)
    assert counts["rate_limited"] == kinds.count("rate_limited") >= 1
    assert counts["invalid_message"] == kinds.count("invalid_message")


def test_a_byte_flood_is_rate_limited(start_server: Any) -> None:
    # The byte bucket holds one max_message_bytes (64 KiB here) and refills at 0.25 MiB/s.
    server = start_server(rate_limit_mib_s=0.25, max_message_bytes=64 * 1024)
    big = msgpack.packb({"pad": b"\0" * (60 * 1024)})
    with opened(server) as ws:
        replies = []
        for _ in range(3):
            ws.send(big)
            replies.append(str(ws.recv(timeout=5)))
        time.sleep(0.5)                       # 60 KiB paid back in 0.23 s
        ws.send(big)
        replies.append(str(ws.recv(timeout=5)))
    kinds = [r.split(":")[0] for r in replies]
    assert kinds == ["invalid_observation", "rate_limited", "rate_limited",
                     "invalid_observation"], replies
    assert "more than 0.25 MiB/s" in replies[1]


def test_refusals_before_the_websocket_are_counted(start_server: Any) -> None:
    server = start_server(api_key="k", allowlist=("r1",))
    with pytest.raises(websockets.InvalidStatus):
        OpenPIClient(uri(server))
    with pytest.raises(websockets.InvalidStatus):
        OpenPIClient(uri(server) + "/r2", api_key="k")
    req = urllib.request.Request(f"http://127.0.0.1:{server.port}/stats",
                                 headers={"Authorization": "Api-Key k"})
    with urllib.request.urlopen(req, timeout=5) as resp:
        assert json.loads(resp.read())["refused"] == {"unauthorized": 1, "http_403": 1}
    with pytest.raises(urllib.error.HTTPError):
        refused(server)


def test_limits_are_validated() -> None:
    from xinfer_ros.openpi.server import ServerConfig

    for bad in ({"idle_timeout_s": -1.0}, {"idle_timeout_s": float("inf")},
                {"rate_limit_hz": 0.0}, {"rate_burst": 0}, {"rate_limit_mib_s": float("nan")}):
        with pytest.raises(ValueError):
            ServerConfig(**bad)


def test_token_bucket() -> None:
    from xinfer_ros.openpi.ratelimit import TokenBucket

    now = [0.0]
    bucket = TokenBucket(2.0, 3, clock=lambda: now[0])
    assert [bucket.take() for _ in range(4)] == [True, True, True, False]
    assert bucket.wait_s() == pytest.approx(0.5)
    now[0] = 0.5
    assert bucket.wait_s() == 0.0 and bucket.take() and not bucket.take()
    now[0] = 100.0
    assert bucket.wait_s(10) == 0.0                    # capped at the burst: never stuck
    with pytest.raises(ValueError):
        TokenBucket(0.0, 1)
