"""The openpi-compatible WebSocket endpoint in front of a shared :class:`StageEngine`.

Protocol (as openpi's ``WebsocketPolicyServer`` and the PyPI ``openpi-client``'s
``WebsocketClientPolicy`` speak it):

1. The client opens a WebSocket (no compression; an optional ``Authorization:
   Api-Key <key>`` header). The server first sends one binary msgpack-numpy message,
   the *metadata* dict (ours: server, policy, model shapes, layout, budget defaults,
   the ``xinfer/*`` keys; see :meth:`OpenPIServer.metadata`).
2. Then, per request, the client sends one binary msgpack-numpy observation and the
   server answers one binary msgpack-numpy dict with ``actions`` (``(H, D_out)``
   float64) and ``server_timing`` (``infer_ms``, and ``prev_total_ms`` of the previous
   round trip from the second reply on), plus ``policy_timing`` and ``xinfer/*``
   extras (status, robot id, budget, per-stage timings, image mask, emulated flag).
3. Errors are a *text* frame (openpi's client raises ``RuntimeError`` with its text).
   openpi's server sends a traceback and closes with 1011; here an invalid message,
   an invalid observation, or a request the engine refused, shed or failed gets one
   readable line (``<kind>: <detail>``) and the connection **stays open** for the next
   observation. Only an unexpected server fault sends the traceback and closes (1011),
   as openpi does; a frame above the size bound is closed by the WebSocket layer (1009).
4. Limits (each refusal is answered with a reason and counted under ``refused`` in
   ``/stats``): a message may hold only as many elements and as much nesting as its
   size allows (``message_limit``, see :class:`~xinfer_ros.openpi.codec.DecodeLimits`);
   a connection may send ``rate_limit_hz`` messages and ``rate_limit_mib_s`` MiB per
   second (``rate_limited``: the message is dropped undecoded, the connection stays
   open, and nothing more is read from it until its budget refills); a connection
   without a complete message for ``idle_timeout_s`` is told ``idle_timeout`` and
   closed (1008), so idle clients cannot hold the ``max_connections`` slots (beyond
   them: HTTP 503 with the reason).
5. ``GET /healthz`` on the same port answers ``200 OK`` (no key needed); ``GET /stats``
   answers JSON counters per robot (key needed when one is configured).

Each connection is one robot: its id comes from the URL path
(``ws://host:port/<robot_id>``), else from ``xinfer/robot_id`` in its first
observation, else ``openpi-<n>``. With an allowlist, only listed ids are served; an id
is served by one connection at a time. Every request goes to the engine under that id
with its own budget, so openpi clients and ROS robots share one scheduler.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import hmac
import http
import itertools
import json
import logging
import os
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import numpy as np
import websockets
from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.frames import CloseCode
from websockets.http11 import Request, Response

from xinfer_ros.core.constants import DEFAULT_BUDGET, DEFAULT_MAX_BUDGET
from xinfer_ros.core.timing import MS_PER_S
from xinfer_ros.engine.api import Engine, EngineResult
from xinfer_ros.openpi.codec import CodecError, LimitError, packb, unpackb
from xinfer_ros.openpi.errors import ObservationFieldError, OpenPIError
from xinfer_ros.openpi.layouts import (
    ALOHA,
    BUILTIN_LAYOUTS,
    LIBERO,
    MappedObservation,
    ModelSpec,
    ObservationLayout,
    as_observation,
    check_layout,
    map_observation,
)
from xinfer_ros.openpi.messages import AnswerLatency, EndpointStats
from xinfer_ros.openpi.options import XINFER_KEYS, RequestOptions, parse_options, valid_robot_id
from xinfer_ros.openpi.ratelimit import TokenBucket
from xinfer_ros.serving.frontend import engine_inputs

__all__ = [
    "API_KEY_ENV",
    "OpenPIServer",
    "ServerConfig",
    "ServerThread",
    "resolve_api_key",
]

_LOG = logging.getLogger("xinfer_ros.openpi")

#: Robots whose counters are kept; the oldest are dropped beyond it, so that a server
#: with many short-lived auto-named connections does not grow without bound.
_MAX_ROBOT_COUNTERS = 4096

#: Answers whose latency ``/stats`` summarises (the most recent ones).
_RECENT_ANSWERS = 2048

#: Environment variable holding the endpoint's API key.
API_KEY_ENV = "XINFER_OPENPI_API_KEY"


def resolve_api_key(key_file: str | None = None) -> str | None:
    """The endpoint's API key: from ``key_file`` when given, else ``$XINFER_OPENPI_API_KEY``.

    The key never travels as a command-line argument or a ROS parameter, where ``ps``
    or ``ros2 param get`` would show it.

    Raises:
        ValueError: When ``key_file`` cannot be read or is empty.
    """
    if key_file:
        try:
            key = Path(key_file).read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise ValueError(f"API key file {key_file}: {exc.strerror or exc}") from None
        if not key:
            raise ValueError(f"API key file {key_file} is empty")
        return key
    return os.environ.get(API_KEY_ENV) or None


@dataclass(frozen=True)
class ServerConfig:
    """Configuration of the openpi endpoint.

    Attributes:
        host: bind address; loopback unless deliberately opened.
        port: TCP port (0: any free port, see :attr:`OpenPIServer.port`).
        layout: observation layout, None to detect LIBERO/ALOHA per observation.
        default_budget_ms: budget of a request without ``xinfer/budget_ms`` (T_E).
        max_budget_ms: largest accepted budget.
        default_prompt: instruction when an observation has none (None: required).
        api_key: required ``Authorization: Api-Key <key>`` header (None: no key).
        allowlist: robot ids served (None: any valid id).
        reserved_ids: ids openpi clients may not take (e.g. the ROS robots sharing the
            engine: the engine sheds a robot's older request when a newer one arrives).
        max_message_bytes: largest accepted WebSocket message.
        max_connections: concurrent connections (more are refused with HTTP 503).
        idle_timeout_s: a connection without a complete message for this long is closed
            (0: never); also bounds a message trickled in slowly.
        rate_limit_hz: messages per second one connection may send (beyond
            ``rate_burst`` back to back); more are refused undecoded.
        rate_burst: messages one connection may send back to back.
        rate_limit_mib_s: message bytes per second one connection may send (MiB/s;
            its bucket holds one ``max_message_bytes``: a big message at a time).
        request_timeout_s: longest wait for the engine before the request is cancelled.
        cpu_workers: threads decoding and resizing large observations off the event loop.
        inline_prepare_bytes: messages up to this size are decoded and mapped on the
            event loop itself: a thread hop costs more than their sub-millisecond work.
        model_name: model preset name (reported in the metadata).
        metadata: extra entries of the metadata message.
    """

    host: str = "127.0.0.1"
    port: int = 8000
    layout: ObservationLayout | None = None
    default_budget_ms: float = DEFAULT_BUDGET * MS_PER_S
    max_budget_ms: float = DEFAULT_MAX_BUDGET * MS_PER_S
    default_prompt: str | None = None
    api_key: str | None = None
    allowlist: tuple[str, ...] | None = None
    reserved_ids: tuple[str, ...] = ()
    max_message_bytes: int = 16 * 1024 * 1024
    max_connections: int = 64
    idle_timeout_s: float = 60.0
    rate_limit_hz: float = 100.0
    rate_burst: int = 20
    rate_limit_mib_s: float = 64.0
    request_timeout_s: float = 30.0
    cpu_workers: int = 2
    inline_prepare_bytes: int = 1024 * 1024
    model_name: str = "tiny"
    metadata: dict[str, object] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not 0 <= self.port <= 65535:
            raise ValueError(f"port must be in 0..65535, got {self.port}")
        if not 0 < self.default_budget_ms <= self.max_budget_ms:
            raise ValueError("need 0 < default_budget_ms <= max_budget_ms")
        if self.max_message_bytes < 1024:
            raise ValueError("max_message_bytes must be >= 1024")
        if self.max_connections < 1 or self.cpu_workers < 1:
            raise ValueError("max_connections and cpu_workers must be >= 1")
        if not 0 <= self.idle_timeout_s < float("inf"):
            raise ValueError(f"idle_timeout_s must be finite and >= 0, got "
                             f"{self.idle_timeout_s}")
        if not (0 < self.rate_limit_hz < float("inf") and self.rate_burst >= 1
                and 0 < self.rate_limit_mib_s < float("inf")):
            raise ValueError("need rate_limit_hz > 0, rate_burst >= 1 and "
                             "rate_limit_mib_s > 0 (finite)")
        if self.api_key is not None and not self.api_key:
            raise ValueError("api_key must be non-empty when given")
        for robot in self.allowlist or ():
            why = valid_robot_id(robot)
            if why is not None:
                raise ValueError(f"allowlist entry {robot!r}: {why}")


class _ClientError(OpenPIError):
    """A request the client can fix; answered with a text frame, connection kept.

    Attributes:
        kind: short machine-readable category (first word of the reply).
        close: the connection cannot continue (reply, then close with 1008).
        reason: the ``/stats`` counter it is counted under (default: ``kind``).
    """

    def __init__(self, kind: str, detail: str, *, close: bool = False,
                 reason: str | None = None) -> None:
        super().__init__(detail)
        self.kind = kind
        self.close = close
        self.reason = reason if reason is not None else kind

    def text(self) -> str:
        tail = "" if self.close else " (the connection stays open)"
        return f"{self.kind}: {self} [xinfer_ros openpi server]{tail}"


@dataclass
class _Session:
    """Per-connection state (owned by the connection's handler task)."""

    number: int
    messages: TokenBucket
    message_bytes: TokenBucket
    robot_id: str | None = None
    seq: int = 0
    prev_total_ms: float | None = None
    masked_logged: bool = False


@dataclass
class _RobotCounters:
    requests: int = 0
    ok: int = 0
    errors: int = 0
    connections: int = 0


class OpenPIServer:
    """Serve openpi clients from a shared, started :class:`StageEngine`.

    Args:
        engine: the engine (thread-safe ``submit``/``cancel``); not closed here.
        model: what the served model takes and returns.
        config: endpoint configuration.

    Use within one asyncio loop: ``await start()``, then ``await aclose()``; or run it
    on its own thread with :class:`ServerThread`.

    Raises:
        LayoutSettingError: when the configured layout's transforms do not fit the model.
    """

    def __init__(self, engine: Engine, model: ModelSpec,
                 config: ServerConfig | None = None) -> None:
        self.engine = engine
        self.model = model
        self.config = config if config is not None else ServerConfig()
        if self.config.layout is not None:
            check_layout(self.config.layout, model)
        self._server: Server | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._numbers = itertools.count(1)
        self._lock = threading.Lock()
        self._active: set[str] = set()
        self._connections = 0
        self._robots: dict[str, _RobotCounters] = {}
        self._refused: dict[str, int] = {}
        #: (ms from receipt to reply, chunk or refusal) of the most recent answers.
        self._answers: collections.deque[tuple[float, bool]] = collections.deque(
            maxlen=_RECENT_ANSWERS)
        #: Non-empty: every inference is refused with this reason (a lifecycle node's
        #: inactive server); set from any thread.
        self.refusal = ""

    # -- lifecycle ------------------------------------------------------------------------
    async def start(self) -> int:
        """Bind and start accepting connections; return the bound port."""
        cfg = self.config
        self._pool = ThreadPoolExecutor(cfg.cpu_workers, thread_name_prefix="openpi-cpu")
        # compression=None as openpi (images do not deflate well; it costs CPU); a small
        # max_queue bounds the frames buffered per connection beyond max_size each (a
        # client waits for each reply, so two cover the message being served).
        self._server = await serve(
            self._handler, cfg.host, cfg.port, compression=None,
            max_size=cfg.max_message_bytes, max_queue=2,
            process_request=self._process_request, logger=_LOG)
        port = self.port
        _LOG.info("openpi endpoint on ws://%s:%d (policy %s, backend %s%s)", cfg.host, port,
                  self.engine.policy.name, self.engine.backend.name,
                  ", EMULATED" if self.engine.backend.emulated else "")
        layouts = [cfg.layout] if cfg.layout is not None else [LIBERO, ALOHA]
        for layout in layouts:
            assert layout.transforms is not None
            _LOG.info("layout %s: openpi transforms %s", layout.name,
                      layout.transforms.describe())
        return port

    @property
    def port(self) -> int:
        """The bound TCP port (after :meth:`start`)."""
        if self._server is None:
            raise RuntimeError("server not started")
        return int(next(iter(self._server.sockets)).getsockname()[1])

    async def aclose(self) -> None:
        """Close every connection (1001) and stop listening; the engine stays up."""
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None

    # -- introspection ----------------------------------------------------------------------
    def metadata(self, robot_id: str | None) -> dict[str, object]:
        """The metadata message sent on connect (msgpack-ready)."""
        cfg = self.config
        backend = self.engine.backend
        return {
            "server": "xinfer_ros", "protocol": "openpi-websocket/msgpack-numpy",
            "robot_id": robot_id, "policy": self.engine.policy.name,
            "backend": backend.name, "emulated": bool(backend.emulated),
            "model": cfg.model_name, **self.model.to_dict(),
            "layout": cfg.layout.to_dict() if cfg.layout is not None else "auto",
            "default_budget_ms": cfg.default_budget_ms, "max_budget_ms": cfg.max_budget_ms,
            "xinfer_keys": list(XINFER_KEYS), **cfg.metadata,
        }

    def stats(self) -> EndpointStats:
        """Counters per robot, refusals by reason and the engine's snapshot (thread-safe)."""
        with self._lock:
            robots = {k: vars(v).copy() for k, v in self._robots.items()}
            refused = dict(self._refused)
            connections = self._connections
            answers = list(self._answers)
        return {"connections": connections, "robots": robots, "refused": refused,
                "answers": _latency(answers), "engine": self.engine.stats()}

    def _refuse(self, reason: str) -> None:
        """Count one refusal under ``reason`` (thread-safe)."""
        with self._lock:
            self._refused[reason] = self._refused.get(reason, 0) + 1

    # -- handshake ----------------------------------------------------------------------------
    def _authorized(self, request: Request) -> bool:
        key = self.config.api_key
        if key is None:
            return True
        header = request.headers.get("Authorization", "")
        return hmac.compare_digest(header.encode(), f"Api-Key {key}".encode())

    def _path_robot(self, path: str) -> str | None:
        name = unquote(urlsplit(path).path).strip("/")
        return name or None

    def _process_request(self, connection: ServerConnection,
                         request: Request) -> Response | None:
        path = urlsplit(request.path).path
        if path == "/healthz":
            return connection.respond(http.HTTPStatus.OK, "OK\n")
        if not self._authorized(request):
            self._refuse("unauthorized")
            return connection.respond(http.HTTPStatus.UNAUTHORIZED,
                                      "missing or wrong 'Authorization: Api-Key <key>' header\n")
        if path == "/stats":
            return connection.respond(http.HTTPStatus.OK, json.dumps(self.stats()) + "\n")
        robot = self._path_robot(request.path)
        if robot is not None:
            why = self._refusal(robot)
            if why is not None:
                status, text = why
                self._refuse(f"http_{status.value}")
                return connection.respond(status, text + "\n")
        with self._lock:
            full = self._connections >= self.config.max_connections
        if full:
            self._refuse("connection_limit")
            return connection.respond(http.HTTPStatus.SERVICE_UNAVAILABLE,
                                      f"{self.config.max_connections} connections already "
                                      "(the endpoint's max_connections); retry later\n")
        return None

    def _refusal(self, robot: str) -> tuple[http.HTTPStatus, str] | None:
        """Why ``robot`` cannot be served now (status, text), or None."""
        why = valid_robot_id(robot)
        if why is not None:
            return http.HTTPStatus.BAD_REQUEST, f"robot id: {why}"
        if robot in self.config.reserved_ids:
            return http.HTTPStatus.FORBIDDEN, f"robot id {robot!r} is reserved (a ROS robot)"
        allow = self.config.allowlist
        if allow is not None and robot not in allow:
            return http.HTTPStatus.FORBIDDEN, f"robot {robot!r} is not on the allowlist"
        with self._lock:
            if robot in self._active:
                return http.HTTPStatus.CONFLICT, f"robot {robot!r} is already connected"
        return None

    # -- connection -----------------------------------------------------------------------------
    def _claim(self, session: _Session, robot: str) -> None:
        """Bind ``robot`` to the connection (raises :class:`_ClientError` when refused)."""
        why = self._refusal(robot)
        if why is not None:
            raise _ClientError("forbidden", why[1], close=True)
        with self._lock:
            self._active.add(robot)
            self._counters(robot).connections += 1
        session.robot_id = robot

    async def _handler(self, ws: ServerConnection) -> None:
        cfg = self.config
        byte_rate = cfg.rate_limit_mib_s * (1 << 20)
        session = _Session(next(self._numbers), TokenBucket(cfg.rate_limit_hz, cfg.rate_burst),
                           TokenBucket(byte_rate, cfg.max_message_bytes))
        with self._lock:
            self._connections += 1
        try:
            path_robot = self._path_robot(ws.request.path) if ws.request is not None else None
            if path_robot is not None:
                try:
                    self._claim(session, path_robot)
                except _ClientError as exc:  # lost a race with another connection
                    await ws.close(CloseCode.POLICY_VIOLATION, str(exc)[:120])
                    return
            if await _send_quietly(ws, packb(self.metadata(session.robot_id))):
                await self._serve(ws, session)
        finally:
            with self._lock:
                self._connections -= 1
                if session.robot_id is not None:
                    self._active.discard(session.robot_id)
            if session.robot_id is not None:
                self.engine.cancel(session.robot_id, "openpi client disconnected")

    async def _serve(self, ws: ServerConnection, session: _Session) -> None:
        """Answer observations one at a time until the client goes away."""
        idle = self.config.idle_timeout_s or None
        while True:
            try:
                # Cancelling recv() is safe: a partly received message stays buffered.
                message = await asyncio.wait_for(ws.recv(), idle)
            except websockets.ConnectionClosed:
                _LOG.info("openpi connection %d (%s) closed", session.number, session.robot_id)
                return
            except asyncio.TimeoutError:
                await self._close_idle(ws, session)
                return
            start = time.monotonic()
            try:
                self._check_rate(session, message)
                reply: bytes | str = await self._infer(session, message)
            except _ClientError as exc:
                reply = exc.text()
                self._refuse(exc.reason)
                self._count(session, ok=False, start=start)
                if exc.kind == "rate_limited":
                    await _send_quietly(ws, reply)
                    await self._pay_for(session, message)
                    continue
                if exc.close:
                    await _send_quietly(ws, reply)
                    await ws.close(CloseCode.POLICY_VIOLATION, exc.kind)
                    return
            except Exception:
                # Unexpected: do as openpi does (traceback, then close 1011).
                _LOG.exception("openpi connection %d: internal error", session.number)
                await _send_quietly(ws, traceback.format_exc())
                await ws.close(CloseCode.INTERNAL_ERROR,
                               "Internal server error. Traceback included in previous frame.")
                return
            if not await _send_quietly(ws, reply):
                return
            session.prev_total_ms = (time.monotonic() - start) * 1e3

    async def _close_idle(self, ws: ServerConnection, session: _Session) -> None:
        timeout = self.config.idle_timeout_s
        _LOG.info("openpi connection %d (%s): no complete message in %g s, closing",
                  session.number, session.robot_id, timeout)
        self._refuse("idle_timeout")
        await _send_quietly(ws, _ClientError(
            "idle_timeout", f"no complete message in {timeout:g} s (the endpoint's "
            "idle_timeout_s); reconnect to continue", close=True).text())
        await ws.close(CloseCode.POLICY_VIOLATION, "idle_timeout")

    @staticmethod
    async def _pay_for(session: _Session, message: bytes | str) -> None:
        """After a refusal, read nothing until the refused message is paid for.

        The flood waits in the client's socket (TCP flow control) instead of costing a
        read and a reply each: whatever a client sends, the server reads at most the
        connection's rate.
        """
        await asyncio.sleep(max(session.messages.wait_s(),
                                session.message_bytes.wait_s(len(message))))
        session.messages.take()
        session.message_bytes.take(len(message))

    def _check_rate(self, session: _Session, message: bytes | str) -> None:
        """Refuse a message beyond the connection's rate (before any decoding)."""
        cfg = self.config
        if not session.messages.take():
            raise _ClientError("rate_limited", f"more than {cfg.rate_limit_hz:g} messages/s "
                               f"({cfg.rate_burst} back to back); message dropped")
        if not session.message_bytes.take(len(message)):
            raise _ClientError("rate_limited", f"more than {cfg.rate_limit_mib_s:g} MiB/s; "
                               "message dropped")

    def _count(self, session: _Session, *, ok: bool, start: float | None = None) -> None:
        robot = session.robot_id if session.robot_id is not None else "(unnamed)"
        with self._lock:
            counters = self._counters(robot)
            counters.requests += 1
            counters.ok += int(ok)
            counters.errors += int(not ok)
            if start is not None:  # an answer: its wait, from receipt to reply
                self._answers.append(((time.monotonic() - start) * MS_PER_S, ok))

    def _counters(self, robot: str) -> _RobotCounters:
        """The robot's counters (caller holds the lock)."""
        counters = self._robots.get(robot)
        if counters is None:
            if len(self._robots) >= _MAX_ROBOT_COUNTERS:
                del self._robots[next(iter(self._robots))]
            counters = self._robots[robot] = _RobotCounters()
        return counters

    # -- one request ------------------------------------------------------------------------------
    def _prepare(self, message: bytes) -> tuple[MappedObservation, RequestOptions]:
        """Decode, map and validate (on the loop, or the CPU pool for big messages)."""
        try:
            obs = unpackb(message)
        except LimitError as exc:
            raise _ClientError("message_limit", str(exc), reason=f"message_limit_{exc.limit}") \
                from exc
        except CodecError as exc:
            raise _ClientError("invalid_message", str(exc)) from exc
        try:
            observation = as_observation(obs)
            mapped = map_observation(observation, self.config.layout, self.model,
                                     self.config.default_prompt)
            options = parse_options(
                observation, default_budget_ms=self.config.default_budget_ms,
                max_budget_ms=self.config.max_budget_ms, horizon=self.model.horizon,
                action_dim=self.model.action_dim, out_dim=self._out_dim(mapped.layout))
        except ObservationFieldError as exc:
            raise _ClientError("invalid_observation", str(exc)) from exc
        if options.prev_chunk is not None:
            options = replace(options, prev_chunk=self._chunk_in(mapped, options))
        return mapped, options

    def _chunk_in(self, mapped: MappedObservation, options: RequestOptions) -> np.ndarray:
        """The client's previous chunk in the model's frame (the reply path inverted).

        Only the layout's columns carry the robot's chunk; the model's others are padding.
        """
        assert options.prev_chunk is not None
        cols = self._out_dim(mapped.layout)
        full = np.array(options.prev_chunk, dtype=np.float64)
        full[:, :cols] = mapped.transforms.actions_in(full[:, :cols], mapped.state)
        return full

    def _out_dim(self, layout_name: str) -> int:
        layout = self.config.layout or BUILTIN_LAYOUTS.get(layout_name)
        want = layout.action_dim if layout is not None else None
        return min(want or self.model.action_dim, self.model.action_dim)

    def _bind_robot(self, session: _Session, requested: str | None) -> str:
        if session.robot_id is not None:
            if requested is not None and requested != session.robot_id:
                raise _ClientError("invalid_observation",
                                   f"xinfer/robot_id {requested!r} differs from this "
                                   f"connection's robot {session.robot_id!r}")
            return session.robot_id
        if requested is None:
            if self.config.allowlist is not None:
                raise _ClientError("forbidden", "this server serves an allowlist: name the "
                                   "robot in the URL path or in xinfer/robot_id", close=True)
            requested = f"openpi-{session.number}"
        self._claim(session, requested)
        return requested

    async def _infer(self, session: _Session, message: bytes | str) -> bytes:
        if isinstance(message, str):
            raise _ClientError("invalid_message", "expected a binary msgpack-numpy frame, got "
                                                  "a text frame")
        if self.refusal:
            raise _ClientError("rejected", self.refusal)
        t0 = time.monotonic()
        if len(message) <= self.config.inline_prepare_bytes:
            mapped, options = self._prepare(message)
        else:  # big images to resize: keep the loop serving the other robots meanwhile
            loop = asyncio.get_running_loop()
            mapped, options = await loop.run_in_executor(self._pool, self._prepare, message)
        robot = self._bind_robot(session, options.robot_id)
        if not session.masked_logged and not all(mapped.image_mask):
            session.masked_logged = True
            _LOG.info("robot %s (%s layout): cameras %s masked out (zero image)", robot,
                      mapped.layout, [i for i, m in enumerate(mapped.image_mask) if not m])
        session.seq += 1
        inputs = engine_inputs(
            mapped.images, mapped.prompt, mapped.state, prev_chunk=options.prev_chunk,
            commit=options.commit_steps, shift=options.prev_shift,
            prev_dims=self._out_dim(mapped.layout),
            seed=options.seed if options.seed is not None else session.seq)
        if self.refusal:  # deactivated while the observation was prepared
            raise _ClientError("rejected", self.refusal)
        future = self.engine.submit(inputs, options.budget, robot)
        try:
            # shield: a timeout must not cancel the engine's future (the engine resolves
            # it later); the robot's request is cancelled through the engine instead.
            result = await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(future)),
                                            self.config.request_timeout_s)
        except asyncio.TimeoutError as exc:  # not the builtin before Python 3.11
            self.engine.cancel(robot, "openpi request timed out")
            raise _ClientError("timeout", f"no result within {self.config.request_timeout_s} "
                                          "s") from exc
        status = result.status.name.lower()  # as sent to clients: ok, rejected, shed, error
        if self.refusal:  # deactivated while the request ran: no chunk goes out after
            raise _ClientError("rejected", self.refusal)
        if status != "ok" or result.actions is None:
            raise _ClientError(status, result.reason or "no actions")
        infer_ms = (time.monotonic() - t0) * 1e3
        self._count(session, ok=True, start=t0)
        return packb(self._response(session, mapped, options, result, infer_ms))

    def _response(self, session: _Session, mapped: MappedObservation, options: RequestOptions,
                  result: EngineResult, infer_ms: float) -> dict[str, Any]:
        actions = mapped.transforms.actions_out(np.asarray(result.actions, dtype=np.float64),
                                                mapped.state, self._out_dim(mapped.layout))
        timing: dict[str, float] = {"infer_ms": infer_ms}
        if session.prev_total_ms is not None:
            timing["prev_total_ms"] = session.prev_total_ms
        stage = {k: float(v) for k, v in result.timings.to_dict().items() if np.isfinite(v)}
        return {
            "actions": np.ascontiguousarray(actions),
            "server_timing": timing,
            "policy_timing": {"infer_ms": float(result.latency_ms)},
            "xinfer/status": "ok", "xinfer/robot_id": session.robot_id,
            "xinfer/request_id": int(result.request_id), "xinfer/seq": session.seq,
            "xinfer/budget_ms": options.budget_ms, "xinfer/timings": stage,
            "xinfer/image_mask": list(mapped.image_mask), "xinfer/layout": mapped.layout,
            "xinfer/state_dim_in": mapped.state_dim_in,
            "xinfer/emulated": bool(result.emulated),
        }


def _latency(answers: list[tuple[float, bool]]) -> AnswerLatency:
    """P50/P99 (ms) of every recent answer, refusals included, and of chunks alone.

    A server that sheds answers fast without actions; the robot still waited, so the
    percentiles a user sees count every answer, with the chunk-only ones beside.
    """
    every = np.asarray([ms for ms, _ in answers], dtype=float)
    chunks = np.asarray([ms for ms, ok in answers if ok], dtype=float)

    def pct(values: np.ndarray, q: float) -> float | None:
        return float(np.percentile(values, q)) if values.size else None
    return {"count": int(every.size), "refused": int(every.size - chunks.size),
            "p50_ms": pct(every, 50), "p99_ms": pct(every, 99),
            "chunk_p50_ms": pct(chunks, 50), "chunk_p99_ms": pct(chunks, 99)}


async def _send_quietly(ws: ServerConnection, data: bytes | str) -> bool:
    """Send; False when the client is already gone (nothing else to do then)."""
    try:
        await ws.send(data)
    except websockets.ConnectionClosed:
        return False
    return True


class ServerThread:
    """Run an :class:`OpenPIServer` on its own thread and event loop.

    For hosts that are not asyncio programs: a ROS node, tests, benchmarks.

    Args:
        server: the server (not started).
    """

    def __init__(self, server: OpenPIServer) -> None:
        self.server = server
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self.port = 0

    def start(self, timeout: float = 10.0) -> int:
        """Start the thread, wait until the port is bound, and return it.

        Raises:
            RuntimeError: when the server failed to start (e.g. the port is taken).
        """
        self._thread = threading.Thread(target=self._run, name="openpi-server", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout):
            raise RuntimeError(f"openpi server did not start within {timeout} s")
        if self._error is not None:
            raise RuntimeError(f"openpi server failed to start: {self._error}") from self._error
        return self.port

    def _run(self) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        try:
            self.port = await self.server.start()
        except OSError as exc:
            self._error = exc
            self._ready.set()
            return
        self._ready.set()
        try:
            await self._stop.wait()
        finally:
            await self.server.aclose()

    def close(self, timeout: float = 10.0) -> None:
        """Stop serving and join the thread (the engine is left running)."""
        if self._loop is not None and self._stop is not None and not self._loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop already finished
                self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread is not None:
            self._thread.join(timeout)

    def __enter__(self) -> ServerThread:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

