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

It reads the inference server node's parameter file (``--params-file``, default the
shipped ``config/fleet.yaml``), so it serves with the node's backend, rate table, slots,
Action processes, batching and compilation; an unknown or invalid parameter there
stops it with one line (exit 2). Flags given on the command line override the file.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from xinfer_ros.engine.engine import StageEngine
    from xinfer_ros.fleet.plan import NodeParams
    from xinfer_ros.openpi.server import OpenPIServer, ServerConfig

__all__ = ["build_parser", "main", "server_params"]



#: Flags that override one server parameter of the parameter file, when given.
_OVERRIDES = {"backend": "backend", "model": "model", "model_path": "model_path",
              "device": "device", "policy": "policy", "max_live": "max_live_requests",
              "max_budget_ms": "max_budget_ms", "host": "openpi_host",
              "layout": "openpi_layout", "budget_ms": "openpi_budget_ms",
              "api_key_file": "openpi_api_key_file",
              "max_message_bytes": "openpi_max_message_bytes",
              "max_connections": "openpi_max_connections",
              "idle_timeout_s": "openpi_idle_timeout_s", "rate_limit_hz": "openpi_rate_limit_hz",
              "rate_limit_mib_s": "openpi_rate_limit_mib_s"}


def build_parser() -> argparse.ArgumentParser:
    """The command-line parser."""
    from xinfer_ros.openpi.server import API_KEY_ENV
    from xinfer_ros.serving.server_params import POLICIES

    p = argparse.ArgumentParser(prog="xinfer-serve", description=__doc__.splitlines()[0])
    p.add_argument("--openpi", action="store_true", required=True,
                   help="serve the openpi WebSocket protocol (the only protocol so far)")
    p.add_argument("--params-file", default=None, metavar="YAML",
                   help="the inference server's ROS parameter file (its inference_server "
                        "section; default: the shipped config/fleet.yaml): backend, model, "
                        "rate table, slots, Action processes, batching, compile, limits and "
                        "openpi_* settings, as the node reads them; the flags below override it")
    # None: the parameter file's value.
    p.add_argument("--host", default=None, help="bind address (default: loopback)")
    p.add_argument("--port", type=int, default=8000, help="TCP port (0: any free port)")
    p.add_argument("--backend", choices=("emulated", "torch"), default=None)
    p.add_argument("--model", default=None,
                   help="model preset: config/models/<name>.yaml or a YAML path")
    p.add_argument("--model-path", default=None,
                   help="π0 checkpoint directory (transformers' or lerobot's layout)")
    p.add_argument("--device", default=None, help="torch device (cpu, cuda)")
    p.add_argument("--policy", choices=POLICIES, default=None, help="scheduling policy")
    p.add_argument("--rate-table", default=None,
                   help="rate-table JSON for the backend (default: the file's)")
    p.add_argument("--max-live", type=int, default=None, help="engine backpressure bound")
    p.add_argument("--layout", default=None,
                   help="observation layout and openpi transforms: auto, libero, aloha, "
                        "pi0_libero, pi05_libero, pi0_aloha, pi05_aloha, pi0_aloha_sim, or a "
                        "YAML/JSON file (docs/PI0.md)")
    p.add_argument("--budget-ms", type=float, default=None,
                   help="budget of requests without xinfer/budget_ms")
    p.add_argument("--max-budget-ms", type=float, default=None)
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


def server_params(args: argparse.Namespace) -> NodeParams:
    """The server parameters xinfer-serve runs with: the file's, then the flags given.

    Raises:
        ValueError: On an unreadable file, an unknown parameter or an invalid value (one
            line naming the file or flag and the parameter).
    """
    from xinfer_ros.fleet.plan import default_config
    from xinfer_ros.serving.params import ParamSpec
    from xinfer_ros.serving.server_params import OPENPI_PARAMS, PARAMS, read_server_params

    p = read_server_params(args.params_file or default_config())
    specs: dict[str, ParamSpec] = {spec.name: spec for spec in [*PARAMS, *OPENPI_PARAMS]}
    given = {param: value for flag, param in _OVERRIDES.items()
             if (value := getattr(args, flag)) is not None}
    if args.rate_table is not None:
        given[f"{given.get('backend', p['backend'])}.rate_table"] = args.rate_table
    if args.allow is not None:
        given["openpi_allow"] = ",".join(args.allow)
    for name, value in given.items():
        try:
            specs[name].validate(value)
        except ValueError as exc:
            raise ValueError(f"command line: {exc}") from None
    return {**p, **given}


def _build_engine(p: NodeParams) -> StageEngine:
    from xinfer_ros.engine.from_params import build_engine
    from xinfer_ros.model.presets import model_io

    return build_engine(p, model_io(p["model"], p["model_path"] or None))


def _config(args: argparse.Namespace, p: NodeParams) -> ServerConfig:
    from xinfer_ros.openpi.from_params import endpoint_config

    return endpoint_config(p, port=args.port, default_prompt=args.default_prompt,
                           **{k: v for k in ("max_connections", "request_timeout_s",
                                             "idle_timeout_s", "rate_limit_hz",
                                             "rate_limit_mib_s")
                              if (v := getattr(args, k)) is not None})


async def _serve(server: OpenPIServer, host: str) -> None:
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
        params = server_params(args)
        config = _config(args, params)
        engine = _build_engine(params)
        io = engine.backend.io
        if io is None:  # build_engine gives every backend its model's IO
            raise ValueError(f"backend {params['backend']!r} has no model IO")
        server = OpenPIServer(engine, ModelSpec.from_io(io), config)
    except (ValueError, OSError) as exc:
        print(f"xinfer-serve: {exc}", file=sys.stderr)
        return 2
    engine.start()
    try:
        asyncio.run(_serve(server, config.host))
    except OSError as exc:  # typically: the port is taken
        print(f"xinfer-serve: {exc}", file=sys.stderr)
        return 1
    finally:
        engine.close(drain_timeout=1.0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
