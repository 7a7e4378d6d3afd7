"""``xinfer-serve --openpi``: serve openpi WebSocket clients without ROS.

Builds a backend and a :class:`~xinfer_ros.engine.engine.StageEngine` under the chosen
scheduling policy and serves it on an openpi-compatible endpoint (see
:mod:`xinfer_ros.openpi.server`)::

    xinfer-serve --openpi --port 8000 --backend torch --model pi0-tiny --policy xinfer
    # client (openpi-client from PyPI):
    #   WebsocketClientPolicy(host="127.0.0.1", port=8000).infer(obs)["actions"]

It binds 127.0.0.1 unless ``--host`` says otherwise. When the port is bound it prints
one line ``xinfer-serve: openpi endpoint ws://HOST:PORT ...`` on stdout (``--port 0``
picks a free port; scripts read it from that line). SIGINT/SIGTERM stop it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import sys
from collections.abc import Sequence
from typing import Any

from xinfer_ros.core.constants import DEFAULT_BUDGET, DEFAULT_MAX_BUDGET, MAX_LIVE_REQUESTS
from xinfer_ros.core.timing import MS_PER_S

__all__ = ["build_parser", "main"]



def build_parser() -> argparse.ArgumentParser:
    """The command-line parser."""
    from xinfer_ros.openpi.server import API_KEY_ENV

    p = argparse.ArgumentParser(prog="xinfer-serve", description=__doc__.splitlines()[0])
    p.add_argument("--openpi", action="store_true", required=True,
                   help="serve the openpi WebSocket protocol (the only protocol so far)")
    p.add_argument("--host", default="127.0.0.1", help="bind address (default: loopback)")
    p.add_argument("--port", type=int, default=8000, help="TCP port (0: any free port)")
    p.add_argument("--backend", choices=("emulated", "torch"), default="torch")
    p.add_argument("--model", default="pi0-tiny",
                   help="model preset: config/models/<name>.yaml or a YAML path (pi0-tiny)")
    p.add_argument("--model-path", default="",
                   help="π0 checkpoint directory (transformers' or lerobot's layout)")
    p.add_argument("--device", default="cpu", help="torch device (cpu, cuda)")
    p.add_argument("--policy", choices=("fifo", "edf", "slack_gate", "xinfer"),
                   default="xinfer", help="scheduling policy")
    p.add_argument("--rate-table", default="", help="rate-table JSON (default: shipped)")
    p.add_argument("--max-live", type=int, default=MAX_LIVE_REQUESTS,
                   help="engine backpressure bound")
    p.add_argument("--layout", default="auto",
                   help="observation layout: auto, libero, aloha, or a YAML/JSON file")
    p.add_argument("--budget-ms", type=float, default=DEFAULT_BUDGET * MS_PER_S,
                   help="budget of requests without xinfer/budget_ms")
    p.add_argument("--max-budget-ms", type=float, default=DEFAULT_MAX_BUDGET * MS_PER_S)
    p.add_argument("--default-prompt", default=None,
                   help="instruction for observations without a prompt (default: required)")
    p.add_argument("--api-key-file", default=None, metavar="FILE",
                   help=f"require 'Authorization: Api-Key <key>' with the key in FILE (or set "
                        f"${API_KEY_ENV}; a key on the command line would show in ps)")
    p.add_argument("--allow", nargs="+", default=None, metavar="ROBOT",
                   help="allowlist of robot ids (URL path or xinfer/robot_id)")
    # The endpoint's own defaults apply where these are not given (the openpi extra's
    # modules load only when serving).
    p.add_argument("--max-message-bytes", type=int, default=None, help="default 16 MiB")
    p.add_argument("--max-connections", type=int, default=None, help="default 64")
    p.add_argument("--request-timeout-s", type=float, default=None, help="default 30 s")
    p.add_argument("--idle-timeout-s", type=float, default=None,
                   help="close a connection without a complete message for this long "
                        "(0: never; default 60 s)")
    p.add_argument("--rate-limit-hz", type=float, default=None,
                   help="messages per second per connection (default 100)")
    p.add_argument("--rate-limit-mib-s", type=float, default=None,
                   help="message MiB per second per connection (default 64)")
    p.add_argument("--log-level", default="INFO")
    return p


def _build_engine(args: argparse.Namespace) -> Any:
    from xinfer_ros.core.rate_table import resolve_rate_table
    from xinfer_ros.engine.backends import make_backend
    from xinfer_ros.engine.engine import StageEngine
    from xinfer_ros.engine.types import EngineConfig
    from xinfer_ros.model.presets import model_io

    table = resolve_rate_table(args.rate_table)
    if args.backend == "emulated":
        backend = make_backend("emulated", table=table,
                               io=model_io(args.model, args.model_path or None))
    else:
        backend = make_backend("torch", model=args.model, device=args.device,
                               model_path=args.model_path or None)
    return StageEngine(backend, args.policy, EngineConfig(max_live=args.max_live),
                       rate_table=table)


def _config(args: argparse.Namespace) -> Any:
    from xinfer_ros.openpi.layouts import load_layout
    from xinfer_ros.openpi.server import ServerConfig, resolve_api_key

    return ServerConfig(
        host=args.host, port=args.port, layout=load_layout(args.layout),
        default_budget_ms=args.budget_ms, max_budget_ms=args.max_budget_ms,
        default_prompt=args.default_prompt,
        api_key=resolve_api_key(args.api_key_file),
        allowlist=tuple(args.allow) if args.allow else None, model_name=args.model,
        **{k: v for k in ("max_message_bytes", "max_connections", "request_timeout_s",
                          "idle_timeout_s", "rate_limit_hz", "rate_limit_mib_s")
           if (v := getattr(args, k)) is not None})


async def _serve(server: Any, host: str) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):  # non-POSIX loops
            loop.add_signal_handler(sig, stop.set)
    port = await server.start()
    emulated = " [EMULATED backend: placeholder actions]" if server.engine.backend.emulated \
        else ""
    print(f"xinfer-serve: openpi endpoint ws://{host}:{port} (health: "
          f"http://{host}:{port}/healthz, policy {server.engine.policy.name}){emulated}",
          flush=True)
    try:
        await stop.wait()
    finally:
        await server.aclose()


def main(argv: Sequence[str] | None = None) -> int:
    """Run the endpoint until SIGINT/SIGTERM; return the exit status."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from xinfer_ros.openpi.layouts import ModelSpec
    from xinfer_ros.openpi.server import OpenPIServer

    try:
        config = _config(args)
        engine = _build_engine(args)
    except (ValueError, OSError) as exc:
        print(f"xinfer-serve: {exc}", file=sys.stderr)
        return 2
    engine.start()
    try:
        model = ModelSpec.from_io(engine.backend.io)
        asyncio.run(_serve(OpenPIServer(engine, model, config), args.host))
    except OSError as exc:  # typically: the port is taken
        print(f"xinfer-serve: {exc}", file=sys.stderr)
        return 1
    finally:
        engine.close(drain_timeout=1.0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
