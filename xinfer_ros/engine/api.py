"""The engine as its front ends see it: a Protocol, the result type and the status codes.

The ROS server (:mod:`xinfer_ros.nodes.inference_server`) and the openpi endpoint
(:mod:`xinfer_ros.openpi.server`) hold an :class:`Engine`, submit
:class:`~xinfer_ros.model.inputs.RequestInputs` and read back an :class:`EngineResult`
with a :class:`Status`. :class:`~xinfer_ros.engine.engine.StageEngine` is the one
implementation; a test double need only provide these members. Torch- and ROS-free:
the front end packages may import this module, and only this one, of the engine
(``test/test_layers.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from typing import Protocol, TypedDict

from xinfer_ros.engine.types import EngineConfig, EngineResult, StageTimings, Status
from xinfer_ros.model.inputs import RequestInputs

__all__ = ["BackendInfo", "Engine", "EngineResult", "EngineStats", "PolicyInfo", "RequestInputs",
           "ResultCallback", "StageTimings", "Status"]

#: ``callback(result)`` invoked once per submitted request.
ResultCallback = Callable[[EngineResult], None]



class EngineStats(TypedDict):
    """What :meth:`Engine.stats` reports (JSON-ready)."""

    held: int  # responses held for phase spreading so far
    held_s: float  # their total hold (s)
    emulated: bool  # whether the backend only emulates the model
    policy: str  # name of the policy of new requests
    live: int  # requests in the engine now
    results: dict[str, int]  # results so far by status name
    running: list[int]  # units running per stage
    slots: list[int]  # effective unit slots per stage
    draining_policies: int  # replaced policies still finishing their requests
    decisions: int  # policy decisions so far
    decision_ms_total: float  # their total cost (ms)
    fast_path_steps: int  # decisions taken off the dispatcher thread (idle engine)
    fast_path_units: int  # stage units run back to back on the fast-path lane

class BackendInfo(Protocol):
    """What a front end reads of the engine's backend (names, shapes; no model calls)."""

    @property
    def name(self) -> str:
        """Backend name (``torch``, ``emulated``)."""

    @property
    def emulated(self) -> bool:
        """True when actions are placeholders and timings come from a rate table."""

    @property
    def device(self) -> str:
        """Device string (``cpu``, ``cuda``, ``emulated``)."""

    @property
    def action_shape(self) -> tuple[int, int]:
        """``(H, D)`` of a returned chunk."""


class PolicyInfo(Protocol):
    """What a front end reads of the engine's scheduling policy."""

    @property
    def name(self) -> str:
        """Registry name of the policy."""


class Engine(Protocol):
    """The stage engine's calls a front end makes; every one is thread-safe."""

    @property
    def backend(self) -> BackendInfo:
        """The model implementation's description."""

    @property
    def policy(self) -> PolicyInfo:
        """The policy new requests go to."""

    @property
    def config(self) -> EngineConfig:
        """The engine's switches and bounds."""

    @property
    def running(self) -> bool:
        """Started, not closed, and serving."""

    def start(self) -> object:
        """Start serving (idempotent)."""

    def close(self, drain_timeout: float = ...) -> None:
        """Stop accepting work, drain live requests, stop all threads."""

    def submit(self, request_inputs: RequestInputs, budget: float, robot_id: str,
               callback: ResultCallback | None = None, *,
               age: float = ...) -> Future[EngineResult]:
        """Submit one request with its budget (s, validated by the front end)."""

    def cancel(self, robot_id: str, reason: str = ...) -> None:
        """Cancel a robot's live requests at their next stage boundary."""

    def set_policy(self, policy: str, **kwargs: object) -> Future[str]:
        """Switch the policy of new requests; resolves with its name."""

    def batching(self) -> str:
        """How the lanes batch now, in words.

        E.g. ``off (max_batch 1)``, ``up to 4 a forward``, or ``up to 4 a forward while
        saturated: now one unit a lane``.
        """

    def stats(self) -> EngineStats:
        """A JSON-ready snapshot for diagnostics."""
