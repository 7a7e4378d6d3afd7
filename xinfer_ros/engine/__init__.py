"""Asynchronous stage engine, execution lanes, backends and calibration (no ROS).

Public entry points: :class:`StageEngine` (submit / cancel / set_policy), the backends
(:func:`make_backend`: ``emulated`` or ``torch``; torch is imported only when asked
for), :class:`EngineConfig` / :func:`mode_config` for the §6.4 ablation switches, and
:class:`EngineResult` / :class:`Status` for what a request returns. The front ends hold
the engine through :mod:`xinfer_ros.engine.api` (torch-free: the ``Engine`` Protocol,
the result and status types) and submit :class:`~xinfer_ros.model.inputs.RequestInputs`.
"""

from xinfer_ros.engine.backends import EMULATION_NOTICE, Backend, EmulatedBackend, make_backend
from xinfer_ros.engine.clock import Clock
from xinfer_ros.engine.engine import ResultCallback, StageEngine
from xinfer_ros.engine.types import (
    TABLE6,
    EngineConfig,
    EngineResult,
    ExecMode,
    Overflow,
    StageTimings,
    Status,
    ablation_config,
    mode_config,
)

__all__ = [
    "EMULATION_NOTICE",
    "TABLE6",
    "Backend",
    "Clock",
    "EmulatedBackend",
    "EngineConfig",
    "EngineResult",
    "ExecMode",
    "Overflow",
    "ResultCallback",
    "StageEngine",
    "StageTimings",
    "Status",
    "ablation_config",
    "make_backend",
    "mode_config",
]
