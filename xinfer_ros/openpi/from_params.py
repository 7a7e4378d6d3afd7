"""The openpi endpoint's configuration from the server's ``openpi_*`` parameters.

One mapping for the inference server node's bridge and ``xinfer-serve``, which read the
same parameters (:data:`xinfer_ros.serving.server_params.OPENPI_PARAMS`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypedDict

from xinfer_ros.openpi.layouts import load_layout
from xinfer_ros.openpi.server import ServerConfig, resolve_api_key
from xinfer_ros.serving.params import Params

if TYPE_CHECKING:  # typing.Unpack is 3.11+ (setup.py allows 3.10): annotations only
    from typing import Unpack

__all__ = ["EndpointOverrides", "endpoint_config"]


class EndpointOverrides(TypedDict, total=False):
    """:class:`ServerConfig` fields a caller sets beside the parameters (flags)."""

    default_prompt: str | None
    max_connections: int
    request_timeout_s: float
    idle_timeout_s: float
    rate_limit_hz: float
    rate_limit_mib_s: float


def endpoint_config(p: Params, *, port: int, reserved_ids: tuple[str, ...] = (),
                    **extra: Unpack[EndpointOverrides]) -> ServerConfig:
    """The endpoint configuration of the validated server parameters ``p``.

    Args:
        p: Server parameters by name, ``openpi_*``, ``max_budget_ms`` and ``model``
            among them.
        port: TCP port to bind (0: any free port).
        reserved_ids: Robot ids openpi clients may not take (the ROS robots).
        extra: Further :class:`ServerConfig` fields (default prompt; limits given here
            take precedence over the parameters').

    Raises:
        ValueError: On an unreadable layout or API key file.
    """
    allow = tuple(a.strip() for a in p["openpi_allow"].split(",") if a.strip()) or None
    limits: EndpointOverrides = {"max_connections": p["openpi_max_connections"],
                                 "idle_timeout_s": p["openpi_idle_timeout_s"],
                                 "rate_limit_hz": p["openpi_rate_limit_hz"],
                                 "rate_limit_mib_s": p["openpi_rate_limit_mib_s"], **extra}
    return ServerConfig(
        host=p["openpi_host"], port=port, layout=load_layout(p["openpi_layout"]),
        default_budget_ms=p["openpi_budget_ms"], max_budget_ms=float(p["max_budget_ms"]),
        api_key=resolve_api_key(p["openpi_api_key_file"] or None), allowlist=allow,
        reserved_ids=reserved_ids, max_message_bytes=p["openpi_max_message_bytes"],
        model_name=p["model"], **limits)
