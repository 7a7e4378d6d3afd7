"""The backend interface: what the engine needs from a model implementation.

A backend owns the weights (or their emulation) and executes one request's stages on
private per-request state. The engine calls, per request::

    state = backend.prepare(inputs, request_id, robot_id)   # CPU pool; InputError = reject
    backend.run_stage(Stage.VIT, state, lane)                # context lane
    backend.run_stage(Stage.PREFILL, state, lane)            # context lane
    backend.run_stage(Stage.ACTION, state, lane)             # action lane
    actions = backend.finish(state)                          # CPU pool: (H, D) float64
    backend.release(state)                                   # always, also on failure

Stages of different requests may interleave arbitrarily; a backend must keep request
state private and weights read-only.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Hashable, Sequence
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import numpy as np

from xinfer_ros.core.constants import ACTION_DIM, HORIZON
from xinfer_ros.core.stages import Stage
from xinfer_ros.engine.lanes import LaneInfo
from xinfer_ros.errors import XInferRosError
from xinfer_ros.model.inputs import RequestInputs

if TYPE_CHECKING:
    from xinfer_ros.model.presets import ModelIO

__all__ = ["AnyBackend", "Backend", "InputValidationError", "StateFactory", "StateT"]

#: A backend's private per-request state (opaque to the engine).
StateT = TypeVar("StateT")

#: ``fresh(stage) -> state`` ready to run ``stage`` (calibration loops).
StateFactory = Callable[[Stage], StateT]


class InputValidationError(XInferRosError, ValueError):
    """Request inputs are malformed; the request is rejected with this reason.

    Attributes:
        field: name of the offending field.
    """

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


class Backend(ABC, Generic[StateT]):
    """Model implementation behind the engine, generic in its per-request state.

    Attributes:
        name: backend name (``torch``, ``emulated``).
        emulated: True when outputs are placeholders and timings come from a table.
        can_batch: whether :meth:`run_batch` stacks states into one forward.
        action_shape: ``(H, D)`` of a returned chunk.
        device: device string (``cpu``, ``cuda``, ``emulated``).
        io: what the served (or emulated) model takes and returns; None for an
            emulation that names no model.
    """

    name: str = ""
    emulated: bool = False
    action_shape: tuple[int, int] = (HORIZON, ACTION_DIM)
    device: str = "cpu"
    io: ModelIO | None = None
    #: Whether :meth:`run_batch` stacks states into one forward (``max_batch`` > 1).
    can_batch: bool = False
    #: Whether one lane thread may run a request's preparation, every stage and its
    #: output back to back (the engine's fast path at low load). True when a lane's
    #: :meth:`lane_setup` holds nothing particular to its group: any lane then runs
    #: any stage as its own lanes would.
    chains_stages: bool = True

    def lane_setup(self, lane: LaneInfo) -> None:
        """Per-lane-thread initialisation (CUDA streams, intra-op thread counts)."""

    @abstractmethod
    def prepare(self, inputs: RequestInputs, request_id: int, robot_id: str) -> StateT:
        """Validate and convert a request's inputs on the CPU; return private request state.

        Raises:
            InputValidationError: (or the model's ``InputError``) naming the field.
        """

    @abstractmethod
    def run_stage(self, stage: Stage, state: StateT, lane: LaneInfo | None) -> None:
        """Run one non-preemptive stage unit to completion (blocking the lane)."""

    def batch_key(self, stage: Stage, state: StateT) -> Hashable | None:
        """Units of ``stage`` whose states have equal keys may run as one batch.

        None (the default): the state's units run one at a time.
        """
        return None

    def run_batch(self, stage: Stage, states: Sequence[StateT], lane: LaneInfo | None) -> None:
        """Run ``stage`` of every state (one batch key) to completion on one lane.

        The default runs them one after the other; a batching backend stacks them
        into one forward with the results each gets alone, up to rounding.
        """
        for state in states:
            self.run_stage(stage, state, lane)

    def check_max_batch(self, max_batch: int) -> None:
        """Refuse batches of more than one unit from a backend that cannot stack them.

        Raises:
            ValueError: ``max_batch`` > 1 and not :attr:`can_batch`.
        """
        if max_batch > 1 and not self.can_batch:
            model = f" with {self.io.name}" if self.io is not None else ""
            raise ValueError(f"the {self.name} backend{model} runs units one at a time: "
                             f"max_batch must be 1, got {max_batch}")

    @property
    def compile_mode(self) -> str:
        """How the Action loop runs: ``off`` (eager) unless a backend compiles it."""
        return "off"

    def set_compile(self, mode: str) -> float:
        """Run the Action loop eagerly (``off``) or compiled; returns compile seconds.

        Raises:
            ValueError: on any mode but ``off`` (a backend with a compiled loop
                overrides this).
        """
        if mode != "off":
            raise ValueError(f"the {self.name} backend has no compiled Action loop")
        return 0.0

    @abstractmethod
    def finish(self, state: StateT) -> np.ndarray:
        """CPU output processing after Action: the ``(H, D)`` chunk in robot units."""

    def release(self, state: StateT) -> None:
        """Drop device memory held by ``state`` (called exactly once per prepared state)."""

    @abstractmethod
    def example_inputs(self, robot_index: int, previous: np.ndarray | None) -> RequestInputs:
        """Valid inputs for benchmarks: fixed per robot, RTC from ``previous`` if given."""

    @abstractmethod
    def state_factory(self) -> StateFactory[StateT]:
        """A factory of states ready to run a given stage (for calibration loops)."""

    def describe(self) -> dict[str, Any]:
        """JSON-ready description for reports."""
        return {"backend": self.name, "emulated": self.emulated, "device": self.device,
                "action_shape": list(self.action_shape),
                "model": self.io.name if self.io is not None else None}

    def close(self) -> None:
        """Release the backend's resources."""


#: A backend of any state type, as the engine holds it (the state stays opaque there).
AnyBackend = Backend[Any]
