"""Serve openpi WebSocket clients from the inference server node's engine.

The node keeps its ROS robots; this bridge adds an openpi endpoint (see
:mod:`xinfer_ros.openpi.server`) on a background thread that submits to the **same**
:class:`~xinfer_ros.engine.engine.StageEngine`, so both kinds of robots are scheduled
by one policy. Wiring, in ``InferenceServer.__init__`` after ``self.engine.start()``::

    from xinfer_ros.nodes.openpi_bridge import start_openpi_bridge
    self._openpi = start_openpi_bridge(self)        # None when openpi_port is 0

and in ``InferenceServer.close()``, before ``self.engine.close(...)``::

    if self._openpi is not None:
        self._openpi.close()

Parameters (declared on the node by :func:`start_openpi_bridge`): ``openpi_port`` (0:
off, the default), ``openpi_host`` (127.0.0.1), ``openpi_layout``, ``openpi_budget_ms``,
``openpi_api_key_file`` (the key itself is never a parameter: a file, or the environment
variable ``XINFER_OPENPI_API_KEY``), ``openpi_allow`` (comma-separated ids, empty: any),
``openpi_max_message_bytes``, ``openpi_max_connections``, ``openpi_idle_timeout_s`` (0:
never), ``openpi_rate_limit_hz`` and ``openpi_rate_limit_mib_s`` (per connection). The
node's ROS robot names are reserved: an openpi client
cannot take one (the engine would shed that robot's requests as superseded). openpi
robots do not appear in ``/xinfer/fleet_stats`` (the node's statistics are per ROS
robot); the endpoint's ``GET /stats`` reports them.
"""

from __future__ import annotations

from typing import Any

from xinfer_ros.engine.api import Engine
from xinfer_ros.nodes.params import declare_params
from xinfer_ros.openpi.from_params import endpoint_config
from xinfer_ros.openpi.layouts import ModelSpec
from xinfer_ros.openpi.messages import EndpointStats
from xinfer_ros.openpi.server import OpenPIServer, ServerConfig, ServerThread
from xinfer_ros.serving.server_params import OPENPI_PARAMS

__all__ = ["OPENPI_PARAMS", "OpenPIBridge", "start_openpi_bridge"]

class OpenPIBridge:
    """An openpi endpoint on its own thread, sharing ``engine``.

    Args:
        engine: the node's started engine.
        model: the served model's shapes.
        config: endpoint configuration.
    """

    def __init__(self, engine: Engine, model: ModelSpec, config: ServerConfig) -> None:
        self.server = OpenPIServer(engine, model, config)
        self._thread = ServerThread(self.server)
        self.port = 0

    def start(self) -> int:
        """Bind and serve; return the port.

        Raises:
            RuntimeError: when the endpoint cannot start (e.g. the port is taken).
        """
        self.port = self._thread.start()
        return self.port

    def refuse(self, reason: str) -> None:
        """Refuse every inference with ``reason`` from now on (empty: serve again)."""
        self.server.refusal = reason

    def stats(self) -> EndpointStats:
        """Per-robot counters of the openpi clients."""
        return self.server.stats()

    def close(self) -> None:
        """Close every openpi connection and stop the thread (the engine stays up)."""
        self._thread.close()


def start_openpi_bridge(node: Any) -> OpenPIBridge | None:
    """Declare the ``openpi_*`` parameters on ``node`` and start the endpoint if asked.

    ``node`` is the inference server: it has ``engine``, ``io`` (what its model takes)
    and ``params`` with ``model`` and ``robots``.

    Returns:
        The running bridge, or None when ``openpi_port`` is 0.
    """
    p = declare_params(node, OPENPI_PARAMS)
    if p["openpi_port"] == 0:
        return None
    config = endpoint_config({**node.params, **p}, port=p["openpi_port"],
                             reserved_ids=tuple(node.params.get("robots", ())))
    model = ModelSpec.from_io(node.io)
    bridge = OpenPIBridge(node.engine, model, config)
    port = bridge.start()
    node.get_logger().info(f"openpi endpoint on ws://{config.host}:{port} sharing the "
                           f"engine (policy {node.engine.policy.name})")
    return bridge
