"""openpi-compatible WebSocket endpoint (ROS-free): codec, layouts, server, client.

Robots that run openpi's ``WebsocketClientPolicy`` join the fleet through
:class:`~xinfer_ros.openpi.server.OpenPIServer`, which submits their observations to
the same :class:`~xinfer_ros.engine.engine.StageEngine` (and scheduling policy) as the
ROS robots. See ``server.py`` for the protocol, ``layouts.py`` for observation layouts
and ``options.py`` for the ``xinfer/*`` keys.
"""

from __future__ import annotations

from xinfer_ros.openpi.codec import CodecError, packb, unpackb
from xinfer_ros.openpi.errors import ObservationFieldError, OpenPIError
from xinfer_ros.openpi.layouts import (
    ALOHA,
    BUILTIN_LAYOUTS,
    LIBERO,
    CameraSource,
    MappedObservation,
    ModelSpec,
    ObservationLayout,
    load_layout,
    map_observation,
)
from xinfer_ros.openpi.options import XINFER_KEYS, RequestOptions, parse_options
from xinfer_ros.openpi.server import OpenPIServer, ServerConfig, ServerThread

__all__ = [
    "ALOHA",
    "BUILTIN_LAYOUTS",
    "LIBERO",
    "XINFER_KEYS",
    "CameraSource",
    "CodecError",
    "MappedObservation",
    "ModelSpec",
    "ObservationFieldError",
    "ObservationLayout",
    "OpenPIError",
    "OpenPIServer",
    "RequestOptions",
    "ServerConfig",
    "ServerThread",
    "load_layout",
    "map_observation",
    "packb",
    "parse_options",
    "unpackb",
]
