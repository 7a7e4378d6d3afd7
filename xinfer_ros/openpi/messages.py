"""The openpi endpoint's messages as types: replies and the ``/stats`` JSON.

A reply is one msgpack-numpy map. openpi's own servers and the peers of
:mod:`~xinfer_ros.openpi.peers` send ``actions`` and ``server_timing``; xinfer's
endpoint adds ``policy_timing`` and the ``xinfer/*`` extras, so every key is optional
to a client. The keys with ``/`` need TypedDict's functional form.
:meth:`~xinfer_ros.openpi.server.OpenPIServer.stats` answers ``GET /stats``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypedDict

import numpy as np
import numpy.typing as npt

__all__ = ["AnswerLatency", "EndpointStats", "PolicyTiming", "Reply", "ServerTiming"]


class ServerTiming(TypedDict, total=False):
    """``server_timing``: the server's time for this request (ms)."""

    infer_ms: float
    #: The previous round trip's total, from the second reply on.
    prev_total_ms: float


class PolicyTiming(TypedDict):
    """``policy_timing``: the engine's latency of this request (ms)."""

    infer_ms: float


#: One reply map; a client checks the keys its server sends.
Reply = TypedDict("Reply", {
    "actions": npt.NDArray[np.float64],   # (H, D_out) in the robot's frame
    "server_timing": ServerTiming,
    "policy_timing": PolicyTiming,
    "xinfer/status": str,
    "xinfer/robot_id": str,
    "xinfer/request_id": int,
    "xinfer/seq": int,
    "xinfer/budget_ms": float,
    "xinfer/timings": dict[str, float],  # per-stage server times (ms)
    "xinfer/image_mask": list[bool],
    "xinfer/layout": str,
    "xinfer/state_dim_in": int,
    "xinfer/emulated": bool,
}, total=False)


class AnswerLatency(TypedDict):
    """Percentiles (ms) of the recent answers: every one, and those with a chunk."""

    count: int
    refused: int
    p50_ms: float | None
    p99_ms: float | None
    chunk_p50_ms: float | None
    chunk_p99_ms: float | None


class EndpointStats(TypedDict):
    """``GET /stats``: the endpoint's counters and the engine's snapshot."""

    connections: int
    #: Per robot id: requests, ok, errors, connections.
    robots: dict[str, dict[str, int]]
    #: Refusals by reason.
    refused: dict[str, int]
    answers: AnswerLatency
    engine: Mapping[str, object]
