"""A minimal synchronous openpi client on our codec (NumPy 2 compatible).

It speaks exactly what the PyPI ``openpi-client``'s ``WebsocketClientPolicy`` speaks
(no compression, metadata first, one binary reply per observation, a text frame is an
error) without that package's ``numpy < 2`` pin, so benchmarks and tools in this
project's environment can drive the endpoint.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import cast

from websockets.sync.client import ClientConnection, connect

from xinfer_ros.openpi.codec import CodecError, packb, unpackb
from xinfer_ros.openpi.errors import OpenPIError
from xinfer_ros.openpi.messages import Reply

__all__ = ["OpenPIClient", "ServerError"]


class ServerError(OpenPIError, RuntimeError):
    """The server answered with a text frame (the openpi protocol's error report)."""


class OpenPIClient:
    """Connect to an openpi WebSocket endpoint.

    Args:
        uri: ``ws://host:port`` or ``ws://host:port/<robot_id>``.
        api_key: sent as ``Authorization: Api-Key <key>`` when given.
        timeout_s: opening-handshake timeout and per-reply timeout.
    """

    def __init__(self, uri: str, api_key: str | None = None, timeout_s: float = 30.0) -> None:
        headers = {"Authorization": f"Api-Key {api_key}"} if api_key else None
        self._timeout = timeout_s
        # websockets >= 17 wants connect() entered as a context manager.
        self._stack = contextlib.ExitStack()
        self._ws: ClientConnection = self._stack.enter_context(
            connect(uri, compression=None, max_size=None, additional_headers=headers,
                    open_timeout=timeout_s))
        self.metadata = _message(unpackb(_binary(self._ws.recv(timeout=timeout_s))))

    def infer(self, obs: Mapping[str, object]) -> Reply:
        """Send one observation and return the reply.

        Raises:
            ServerError: with the server's text when it reports an error.
        """
        self._ws.send(packb(obs))
        # Every openpi reply is a map of the protocol's keys (see Reply).
        return cast(Reply, _message(unpackb(_binary(self._ws.recv(timeout=self._timeout)))))

    def close(self) -> None:
        """Close the connection."""
        self._stack.close()

    def __enter__(self) -> OpenPIClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _message(decoded: object) -> dict[str, object]:
    """A reply as the map every openpi reply is.

    Raises:
        CodecError: When the server sent something else.
    """
    if not isinstance(decoded, dict):
        raise CodecError(f"expected a map from the server, got {type(decoded).__name__}")
    return decoded


def _binary(frame: str | bytes) -> bytes:
    """A binary frame's payload; a text frame is the server's error message.

    Raises:
        ServerError: With the server's text.
    """
    if isinstance(frame, str):
        raise ServerError(frame)
    return frame
