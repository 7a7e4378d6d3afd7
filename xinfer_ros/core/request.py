"""The request contract shared by the policy, the simulator, the engine and the nodes.

A :class:`Request` is created by the driver when a robot's request reaches the server
(time ``arrival`` = a_j) and handed to ``Policy.on_arrival``. From then on the policy
owns its stage states; the driver only reads them. The RTC inputs (previous chunk,
commit length, ...) travel in ``payload`` and are never inspected by the scheduler.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from xinfer_ros.core.constants import DELTA
from xinfer_ros.core.errors import InvalidRequestError
from xinfer_ros.core.stages import NUM_STAGES, STAGES, Stage, StageState
from xinfer_ros.core.timing import deadline

__all__ = ["Request", "check_time"]


def check_time(name: str, value: object, *, positive: bool = False) -> float:
    """Return ``value`` as a finite float, or raise naming the field and the value.

    Args:
        name: field name used in the error message.
        value: the value to check.
        positive: also require ``value > 0``.

    Raises:
        InvalidRequestError: ``value`` is not a real number, is NaN/inf, or is ≤ 0
            when ``positive`` is set.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidRequestError(f"{name} must be a number of seconds, got {value!r}")
    v = float(value)
    if not math.isfinite(v):
        raise InvalidRequestError(f"{name} must be finite, got {value!r}")
    if positive and v <= 0.0:
        raise InvalidRequestError(f"{name} must be > 0 s, got {value!r}")
    return v


@dataclass(eq=False, slots=True)
class Request:
    """One policy request j of one robot.

    Attributes:
        request_id: unique integer id; also the last tie-breaker of every queue order.
        robot_id: the robot that sent it.
        arrival: server arrival time a_j (s).
        budget: response-time budget b_j (s), > 0.
        payload: opaque RTC inputs, passed through untouched.
        delta: δ, time reserved outside the server (s).
        deadline: scheduling deadline ℓ_j = a_j + b_j − δ (derived).
        states: one :class:`StageState` per stage, indexed by ``Stage``.
        issued: issue time of each stage's unit, or None.
        finished: completion time of each stage's unit, or None.
        output: whatever the driver attaches after Action (e.g. the action chunk).
    """

    request_id: int
    robot_id: str
    arrival: float
    budget: float
    payload: Any = None
    delta: float = DELTA
    deadline: float = field(init=False)
    states: list[StageState] = field(init=False)
    issued: list[float | None] = field(init=False)
    finished: list[float | None] = field(init=False)
    output: Any = None
    #: Index of the first stage that is not DONE (3 once Action is done). Kept by the
    #: policy so the hot path need not scan ``states``.
    cursor: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        if isinstance(self.request_id, bool) or not isinstance(self.request_id, int):
            raise InvalidRequestError(f"request_id must be an int, got {self.request_id!r}")
        self.arrival = check_time(f"request {self.request_id}: arrival", self.arrival)
        self.budget = check_time(f"request {self.request_id}: budget", self.budget, positive=True)
        self.delta = check_time(f"request {self.request_id}: delta", self.delta)
        if self.delta < 0.0:
            raise InvalidRequestError(f"request {self.request_id}: delta must be >= 0, "
                                      f"got {self.delta!r}")
        self.robot_id = str(self.robot_id)
        self.deadline = deadline(self.arrival, self.budget, self.delta)
        # A freshly arrived request has its inputs: ViT is ready, later stages wait.
        self.states = [StageState.READY, StageState.WAITING, StageState.WAITING]
        self.issued = [None] * NUM_STAGES
        self.finished = [None] * NUM_STAGES
        self.cursor = 0

    # -- queries ------------------------------------------------------------------
    @property
    def stage(self) -> Stage | None:
        """The first stage that is not DONE (the one ready, running or next), or None."""
        return STAGES[self.cursor] if self.cursor < NUM_STAGES else None

    @property
    def done(self) -> bool:
        """True once the Action unit completed."""
        return self.states[Stage.ACTION] is StageState.DONE

    def slack(self, t: float, remaining: float) -> float:
        """σ_j = ℓ_j − t − R_j for a given remaining-time estimate ``remaining``."""
        return self.deadline - t - remaining

    # -- construction from records ----------------------------------------------------
    @classmethod
    def from_dict(cls, record: Mapping[str, Any]) -> Request:
        """Build a request from a plain mapping (trace replay, ROS message fields).

        Required keys: ``request_id``, ``robot_id``, ``arrival``, ``budget``. Optional:
        ``payload``, ``delta``, and ``stages`` -- a mapping from stage (name or letter)
        to state name that must then name **all three** stages, e.g.
        ``{"V": "done", "P": "ready", "A": "waiting"}``.

        Raises:
            InvalidRequestError: a key is missing, a value is out of range, or
                ``stages`` lacks a stage or gives an impossible combination.
        """
        missing = [k for k in ("request_id", "robot_id", "arrival", "budget") if k not in record]
        if missing:
            raise InvalidRequestError(f"request record is missing {', '.join(missing)}: "
                                      f"{dict(record)!r}")
        req = cls(
            request_id=record["request_id"],
            robot_id=record["robot_id"],
            arrival=record["arrival"],
            budget=record["budget"],
            payload=record.get("payload"),
            delta=record.get("delta", DELTA),
        )
        stages = record.get("stages")
        if stages is not None:
            req.states = _parse_stage_states(req.request_id, stages)
            req.cursor = next((i for i, st in enumerate(req.states)
                               if st is not StageState.DONE), NUM_STAGES)
        return req


def _parse_stage_states(request_id: int, stages: Mapping[Any, Any]) -> list[StageState]:
    states: list[StageState | None] = [None] * NUM_STAGES
    for key, value in stages.items():
        try:
            s = Stage.parse(key)
            st = value if isinstance(value, StageState) else StageState(str(value).lower())
        except ValueError as exc:
            raise InvalidRequestError(f"request {request_id}: bad stage entry "
                                      f"{key!r}: {value!r} ({exc})") from None
        states[s] = st
    lacking = [STAGES[i].name for i, st in enumerate(states) if st is None]
    if lacking:
        raise InvalidRequestError(f"request {request_id} is missing stage(s) "
                                  f"{', '.join(lacking)} in {dict(stages)!r}")
    full: list[StageState] = [st for st in states if st is not None]
    # Pipeline order: DONE* then at most one READY/RUNNING then WAITING*.
    seen_active = False
    for i, st in enumerate(full):
        if st is StageState.DONE:
            if seen_active:
                raise InvalidRequestError(f"request {request_id}: stage {STAGES[i].name} is "
                                          f"done after an unfinished stage: {dict(stages)!r}")
        else:
            if st is not StageState.WAITING and seen_active:
                raise InvalidRequestError(f"request {request_id}: two active stages in "
                                          f"{dict(stages)!r}")
            if st is StageState.WAITING and not seen_active and i > 0 and \
                    full[i - 1] is StageState.DONE:
                raise InvalidRequestError(f"request {request_id}: stage {STAGES[i].name} "
                                          f"waits although its predecessor is done")
            seen_active = True
    return full
