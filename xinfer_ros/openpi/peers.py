"""Peer serving loops for side-by-side benchmarks: how labs serve a policy today.

Written here from the public descriptions of their serving code (never copied), each
in front of the same model as xinfer's endpoint, with the same transport (WebSocket,
msgpack-numpy, our codec) and the same pre- and postprocessing (:func:`map_observation`
with the layout's openpi transforms, the served model's own ``prepare`` and ``finish``,
the layout's output transforms), so that only the serving loop differs:

``openpi`` (openpi's ``WebsocketPolicyServer``)
    An asyncio WebSocket server whose connection handler decodes an observation and
    calls the policy's ``infer`` *synchronously*, inside the handler: the event loop
    is blocked while the model runs, so every connection waits for it and requests are
    served strictly one at a time. The reply carries ``server_timing.infer_ms``.
``lerobot`` (LeRobot's async-inference ``PolicyServer``)
    One session and a one-slot queue of observations: a newer observation replaces
    the one waiting (the oldest is dropped), and one inference thread takes the
    waiting observation and runs the policy. LeRobot's server is written for one
    robot; with several, their observations supersede each other. A superseded
    observation is answered at once with a refusal (``superseded: ...``), so its
    closed-loop robot sends a fresh one instead of waiting for LeRobot's
    ``obs_queue_timeout``; LeRobot's pacing sleep (``inference_latency``) is left out.

The policy is transformers' ``PI0ForConditionalGeneration.sample_actions`` in one call
(no stage split, no RTC), on one torch thread, as the plain servers run it.

Run one as a process (the benchmark does)::

    python -m xinfer_ros.openpi.peers --loop openpi --port 0 --model pi0-tiny

It prints ``peer-serve: ws://127.0.0.1:PORT`` once the port is bound; SIGTERM ends it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import queue
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import websockets
from websockets.asyncio.server import ServerConnection, serve
from websockets.frames import CloseCode

from xinfer_ros.core.timing import MS_PER_S
from xinfer_ros.openpi.codec import CodecError, packb, unpackb
from xinfer_ros.openpi.errors import OpenPIError
from xinfer_ros.openpi.layouts import (
    BUILTIN_LAYOUTS,
    ModelSpec,
    ObservationLayout,
    load_layout,
    map_observation,
)
from xinfer_ros.openpi.messages import Reply, ServerTiming
from xinfer_ros.serving.frontend import engine_inputs

__all__ = ["LOOPS", "LeRobotStyleServer", "OpenPIStyleServer", "SampleActionsPolicy", "main"]

#: Serving loops this module implements, by the name the benchmark uses.
LOOPS: tuple[str, ...] = ("openpi", "lerobot")


class SampleActionsPolicy:
    """One observation in, one chunk out: transformers' ``sample_actions`` in one call.

    Args:
        model: π0-family preset name or YAML path (``pi0-tiny``, ``pi0``).
        model_path: π0 checkpoint directory (the preset's own weights when None).
        layout: observation layout name or file (``aloha``, ``libero``).
        threads: torch intra-op threads (one, as a plain server pins it here).

    Raises:
        ValueError: On a model outside the π0 family (only π0 has ``sample_actions``).
    """

    def __init__(self, model: str, model_path: str | None = None, layout: str = "aloha",
                 threads: int = 1) -> None:
        import torch

        from xinfer_ros.model.loading import load_stage_model
        from xinfer_ros.model.serving import Pi0StageModel

        torch.set_num_threads(threads)
        served = load_stage_model(model, model_path=model_path, device="cpu")
        if not isinstance(served, Pi0StageModel):
            raise ValueError(f"model {model!r} is not of the π0 family: no sample_actions")
        self._served = served
        self.spec = ModelSpec.from_io(served.io)
        self.layout: ObservationLayout | None = load_layout(layout)  # None: detect
        self._seq = 0

    def infer(self, obs: object) -> Reply:
        """The chunk of one decoded observation (``actions``: ``(H, D_out)`` float64).

        Raises:
            ObservationFieldError: On a missing or malformed field.
        """
        import torch

        from xinfer_ros.model.pi0 import stages

        mapped = map_observation(obs, self.layout, self.spec)
        self._seq += 1
        inputs = engine_inputs(mapped.images, mapped.prompt, mapped.state, prev_chunk=None,
                               commit=0, seed=self._seq)
        state: Any = self._served.prepare(inputs.images, inputs.instruction, inputs.state,
                                          seed=self._seq)
        module = self._served.module
        tensors = stages.model_inputs(module, state.prepared)
        sample: Any = module.sample_actions
        with torch.no_grad():
            state.actions = sample(
                state=tensors.state, input_ids=tensors.input_ids,
                pixel_values=tensors.pixel_values,
                noise=stages.sample_noise(module, state.prepared.seed),
                attention_mask=tensors.attention_mask,
                pixel_attention_mask=tensors.pixel_attention_mask)
        chunk = self._served.finish(state)
        layout = self.layout or BUILTIN_LAYOUTS.get(mapped.layout)
        want = layout.action_dim if layout is not None else None
        width = min(want or self.spec.action_dim, self.spec.action_dim)
        # The layout's openpi output transforms, as xinfer's endpoint runs them.
        actions = mapped.transforms.actions_out(np.asarray(chunk, dtype=np.float64),
                                                mapped.state, width)
        return {"actions": np.ascontiguousarray(actions, dtype=np.float64)}


def _metadata(loop: str, policy: SampleActionsPolicy) -> dict[str, object]:
    return {"server": f"{loop}-style peer", **policy.spec.to_dict()}


class OpenPIStyleServer:
    """openpi's loop: ``infer`` runs synchronously inside the connection handler.

    Args:
        policy: the policy every connection shares.
        host: bind address.
        port: TCP port (0: any free port).
    """

    def __init__(self, policy: SampleActionsPolicy, host: str = "127.0.0.1",
                 port: int = 0) -> None:
        self.policy = policy
        self.host, self.port = host, port

    async def _handler(self, ws: ServerConnection) -> None:
        await ws.send(packb(_metadata("openpi", self.policy)))
        prev_total: float | None = None
        while True:
            try:
                message = await ws.recv()
            except websockets.ConnectionClosed:
                return
            start = time.monotonic()
            try:
                # Deliberately blocking: the loop serves nobody else meanwhile.
                reply = self.policy.infer(unpackb(_binary(message)))
            except Exception:  # as openpi: the traceback as text, then close 1011
                with contextlib.suppress(websockets.ConnectionClosed):
                    await ws.send(traceback.format_exc())
                    await ws.close(CloseCode.INTERNAL_ERROR, "Internal server error")
                return
            timing: ServerTiming = {"infer_ms": (time.monotonic() - start) * MS_PER_S}
            if prev_total is not None:
                timing["prev_total_ms"] = prev_total * MS_PER_S
            reply["server_timing"] = timing
            try:
                await ws.send(packb(reply))
            except websockets.ConnectionClosed:
                return
            prev_total = time.monotonic() - start

    async def serve(self, ready: Callable[[int], object], stop: asyncio.Event) -> None:
        """Serve until ``stop`` is set; ``ready(port)`` once bound."""
        async with serve(self._handler, self.host, self.port, compression=None,
                         max_size=None) as server:
            ready(int(next(iter(server.sockets)).getsockname()[1]))
            await stop.wait()


@dataclass
class _Pending:
    """An observation waiting in the one-slot queue, and where its answer goes."""

    obs: object
    loop: asyncio.AbstractEventLoop
    answer: asyncio.Future[bytes | str]


class LeRobotStyleServer:
    """LeRobot's loop: a one-slot observation queue (newest wins), one inference thread.

    Args:
        policy: the policy.
        host: bind address.
        port: TCP port (0: any free port).
    """

    def __init__(self, policy: SampleActionsPolicy, host: str = "127.0.0.1",
                 port: int = 0) -> None:
        self.policy = policy
        self.host, self.port = host, port
        self._queue: queue.Queue[_Pending | None] = queue.Queue(maxsize=1)
        self._put_lock = threading.Lock()
        self._worker = threading.Thread(target=self._infer_loop, name="peer-infer",
                                        daemon=True)

    def _enqueue(self, pending: _Pending) -> None:
        """Put ``pending``; an observation still waiting is dropped and told so."""
        with self._put_lock:
            try:
                old = self._queue.get_nowait()
            except queue.Empty:
                old = None
            self._queue.put_nowait(pending)
        if old is not None:
            _resolve(old, "superseded: a newer observation replaced this one in the queue")

    def _infer_loop(self) -> None:
        while (pending := self._queue.get()) is not None:
            try:
                reply: bytes | str = packb(self.policy.infer(pending.obs))
            except (OpenPIError, ValueError) as exc:
                reply = f"invalid_observation: {exc}"
            _resolve(pending, reply)

    async def _handler(self, ws: ServerConnection) -> None:
        loop = asyncio.get_running_loop()
        await ws.send(packb(_metadata("lerobot", self.policy)))
        while True:
            try:
                message = await ws.recv()
            except websockets.ConnectionClosed:
                return
            try:
                obs = unpackb(_binary(message))
            except CodecError as exc:
                await ws.send(f"invalid_message: {exc}")
                continue
            pending = _Pending(obs, loop, loop.create_future())
            self._enqueue(pending)
            try:
                await ws.send(await pending.answer)
            except websockets.ConnectionClosed:
                return

    async def serve(self, ready: Callable[[int], object], stop: asyncio.Event) -> None:
        """Serve until ``stop`` is set; ``ready(port)`` once bound."""
        self._worker.start()
        try:
            async with serve(self._handler, self.host, self.port, compression=None,
                             max_size=None) as server:
                ready(int(next(iter(server.sockets)).getsockname()[1]))
                await stop.wait()
        finally:
            with self._put_lock:
                with contextlib.suppress(queue.Empty):
                    self._queue.get_nowait()
                self._queue.put_nowait(None)


def _binary(message: str | bytes) -> bytes:
    """A binary frame's payload.

    Raises:
        CodecError: On a text frame (an observation is always binary msgpack).
    """
    if isinstance(message, str):
        raise CodecError("expected a binary msgpack-numpy frame, got a text frame")
    return message


def _resolve(pending: _Pending, reply: bytes | str) -> None:
    """Answer a pending observation from any thread (once)."""
    def settle() -> None:
        if not pending.answer.done():
            pending.answer.set_result(reply)
    with contextlib.suppress(RuntimeError):  # the loop already closed
        pending.loop.call_soon_threadsafe(settle)


def build_parser() -> argparse.ArgumentParser:
    """The command-line parser."""
    p = argparse.ArgumentParser(prog="python -m xinfer_ros.openpi.peers",
                                description=__doc__.splitlines()[0])
    p.add_argument("--loop", choices=LOOPS, required=True, help="serving loop")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0, help="TCP port (0: any free port)")
    p.add_argument("--model", default="pi0-tiny", help="π0-family preset")
    p.add_argument("--model-path", default=None, help="π0 checkpoint directory")
    p.add_argument("--layout", default="aloha", help="observation layout")
    return p


async def _run(server: OpenPIStyleServer | LeRobotStyleServer, host: str) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)

    def ready(port: int) -> None:
        print(f"peer-serve: ws://{host}:{port}", flush=True)
    await server.serve(ready, stop)


def main(argv: Sequence[str] | None = None) -> int:
    """Serve one peer loop until SIGINT/SIGTERM; return the exit status."""
    args = build_parser().parse_args(argv)
    try:
        policy = SampleActionsPolicy(args.model, args.model_path, args.layout)
    except (ValueError, OSError) as exc:
        print(f"peer-serve: {exc}", file=sys.stderr)
        return 2
    cls = OpenPIStyleServer if args.loop == "openpi" else LeRobotStyleServer
    try:
        asyncio.run(_run(cls(policy, args.host, args.port), args.host))
    except OSError as exc:
        print(f"peer-serve: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
