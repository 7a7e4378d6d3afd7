"""The engine a server's parameters describe: one builder for the node and xinfer-serve.

The inference server node and ``xinfer-serve`` read the same parameters (the
``inference_server`` section of ``config/fleet.yaml``; see
:mod:`xinfer_ros.serving.server_params`), so both serve with the same backend, rate
table, execution slots, Action processes, batching and compilation.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from xinfer_ros.config_paths import config_file
from xinfer_ros.core.rate_table import resolve_rate_table
from xinfer_ros.core.timing import MS_PER_S
from xinfer_ros.engine.backends import make_backend
from xinfer_ros.engine.engine import StageEngine
from xinfer_ros.engine.types import EngineConfig
from xinfer_ros.model.presets import ModelIO

__all__ = ["build_engine"]


def build_engine(p: Mapping[str, Any], io: ModelIO) -> StageEngine:
    """A (not yet started) engine for the server parameters ``p``.

    Args:
        p: Validated server parameters by name (the node's, or
            :func:`~xinfer_ros.serving.server_params.read_server_params`'s).
        io: What the model takes (checked against ``cameras`` by the caller).

    Raises:
        ValueError: On a backend or model that cannot be built as configured.
        RateTableError: On a missing or malformed rate table.
    """
    backend_name = p["backend"]
    name, slots = p[f"{backend_name}.rate_table"], list(p[f"{backend_name}.slots"])
    table = resolve_rate_table(config_file(name) if name else None)
    if backend_name == "emulated":
        backend = make_backend("emulated", table=table, io=io)
    else:
        backend = make_backend("torch", model=p["model"], device=p["device"],
                               model_path=p["model_path"] or None,
                               action_processes=p["torch.action_processes"],
                               guidance=p["torch.guidance"], compile=p["torch.compile"],
                               max_batch=p["torch.max_batch"])
    config = EngineConfig(max_live=p["max_live_requests"], phase_spread=p["phase_spread"],
                          phase_spread_margin=p["phase_spread_margin_ms"] / MS_PER_S,
                          max_batch=p["torch.max_batch"] if backend_name == "torch" else 1,
                          batch_when=(p["torch.batch_when"] if backend_name == "torch"
                                      else "always"),
                          fast_path=p["fast_path"], shed_doomed=p["shed_doomed"],
                          lazy_slots=p[f"{backend_name}.lazy_slots"])
    if slots != [0]:
        config = replace(config, slots=(slots[0], slots[1], slots[2]))
    return StageEngine(backend, p["policy"], config, rate_table=table)
