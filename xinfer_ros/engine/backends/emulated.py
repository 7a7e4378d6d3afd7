"""EMULATED backend: a modelled GPU that runs in real time, for capacity tests.

No model runs here. Each stage unit blocks its lane for the time the rate table
predicts: it spends the issue overhead ``h_s``, then performs ``W_s`` of isolated-time
work at ``ρ_s(n_{-j})``, where ``n_{-j}`` counts the *other* units running on the
emulated device at each instant (Eq. 8-9). Whenever a unit starts or ends, every
running unit's rate changes, exactly as in the simulator's ``GpuModel``; the table is
the core's :class:`~xinfer_ros.core.rate_table.RateTable`, the one source of truth.

Outputs are deterministic placeholder chunks of the right shape, **not** actions.
Every log line, result and report produced with this backend says it is emulated.
"""

from __future__ import annotations

import logging
import math
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from xinfer_ros.core.constants import ACTION_DIM, HORIZON
from xinfer_ros.core.progress import finish_time, others, progress
from xinfer_ros.core.rate_table import RateTable, default_rate_table
from xinfer_ros.core.stages import NUM_STAGES, Stage
from xinfer_ros.engine.backends.base import Backend, InputValidationError, StateFactory
from xinfer_ros.engine.clock import Clock
from xinfer_ros.engine.lanes import LaneInfo
from xinfer_ros.model.inputs import RequestInputs

if TYPE_CHECKING:
    from xinfer_ros.model.presets import ModelIO

__all__ = ["EMULATION_NOTICE", "EmulatedBackend", "EmulatedDevice", "EmulatedState"]

_LOG = logging.getLogger("xinfer_ros.engine.emulated")

#: Prefix of every emulated log line and report.
EMULATION_NOTICE = "[EMULATED backend: timings from the rate table, placeholder actions]"

#: Work below this (isolated seconds) counts as finished: float noise of the integration.
_EPS = 1e-9


@dataclass(slots=True, eq=False)
class _Unit:
    stage: int
    compute_start: float
    work: float
    last: float
    rate: float = 1.0
    finished: bool = False


class EmulatedDevice:
    """Real-time emulation of concurrent stage units on one GPU.

    Thread-safe: each lane thread calls :meth:`execute`, which blocks until its unit's
    modelled work is done under the changing concurrency.

    Args:
        table: rate table (W_s, h_s, ρ_s(n)).
        clock: engine clock (may be time-compressed).
        noise: log-normal sigma of a per-unit work factor (0: exact table times).
        seed: seed of the noise stream.
    """

    def __init__(self, table: RateTable, clock: Clock, noise: float = 0.0, seed: int = 0) -> None:
        if noise < 0:
            raise ValueError(f"noise must be >= 0, got {noise!r}")
        self.table = table
        self.clock = clock
        self._noise = noise
        self._rng = np.random.default_rng(np.random.SeedSequence([seed, 0xE3]))
        self._cond = threading.Condition()
        self._units: set[_Unit] = set()
        self.counts: list[int] = [0] * NUM_STAGES

    def _rate(self, stage: int) -> float:
        return self.table.rate(stage, others(self.counts, stage))

    def _advance(self, t: float) -> None:
        """Integrate every unit's work up to ``t`` at the current (constant) rates."""
        for u in self._units:
            u.work -= progress(u.rate, u.compute_start, u.last, t)
            u.last = max(u.last, t)

    def _rerate(self) -> None:
        for u in self._units:
            u.rate = self._rate(u.stage)

    def _factor(self) -> float:
        if self._noise == 0.0:
            return 1.0
        s = self._noise
        return float(np.exp(self._rng.normal(-0.5 * s * s, s)))

    def execute(self, stage: Stage | int, factor: float = 1.0,
                issued_at: float | None = None) -> tuple[float, float]:
        """Run one unit of ``stage``; block until done.

        Args:
            stage: the unit's stage.
            factor: multiplies the unit's work.
            issued_at: engine time the scheduler issued the unit. The table's ``h_s``
                is the whole issue overhead, so it counts from here rather than from
                the moment this lane thread got to run (thread hand-off is part of it).

        Returns:
            ``(issue, end)`` engine times.
        """
        s = int(stage)
        clock = self.clock
        with self._cond:
            t = clock.now()
            self._advance(t)
            # NaN (no scheduler issue time) and future times fall back to now.
            issue = issued_at if issued_at is not None and issued_at <= t else t
            unit = _Unit(s, issue + self.table.overhead[s],
                         self.table.work[s] * factor * self._factor(), t)
            self._units.add(unit)
            self.counts[s] += 1
            self._rerate()
            if t > unit.compute_start:
                # Work the unit would have done since its modelled compute start while
                # the lane thread was being scheduled.
                unit.work -= unit.rate * (t - unit.compute_start)
            self._cond.notify_all()
            while True:
                now = clock.now()
                self._advance(now)
                if now >= unit.compute_start and unit.work <= _EPS:
                    break
                finish = finish_time(unit.rate, unit.compute_start, unit.work, now)
                clock.wait(self._cond, finish - now)
            end = self._retire(unit, clock.now())
            return issue, end

    def _retire(self, unit: _Unit, now: float) -> float:
        """Remove ``unit`` and undo the slowdown its late wake-up caused to others.

        The lane thread wakes a little after the modelled finish; during that overshoot
        the other units were wrongly integrated at the rate *with* this unit. Crediting
        them the difference keeps the emulation faithful to the table.
        """
        overshoot = -unit.work / unit.rate if unit.work < 0 else 0.0
        t_end = now - overshoot
        self._units.discard(unit)
        self.counts[unit.stage] -= 1
        old = {id(u): u.rate for u in self._units}
        self._rerate()
        if overshoot > 0:
            for u in self._units:
                begin = max(t_end, u.compute_start)
                if now > begin:
                    u.work -= (u.rate - old[id(u)]) * (now - begin)
        self._cond.notify_all()
        return t_end

    @property
    def running(self) -> tuple[int, int, int]:
        """Units currently on the emulated device per stage."""
        with self._cond:
            return (self.counts[0], self.counts[1], self.counts[2])


@dataclass(slots=True)
class EmulatedState:
    """Private state of one emulated request."""

    request_id: int
    robot_id: str
    seed: int
    next_stage: int = 0
    work_factor: float = 1.0
    action_end: float = float("nan")


class EmulatedBackend(Backend[EmulatedState]):
    """Backend whose units take the rate table's times on an :class:`EmulatedDevice`.

    Args:
        table: rate table (default: the shipped one).
        clock: engine clock; the engine passes its own.
        action_shape: ``(H, D)`` of the placeholder chunk.
        io: the emulated model's inputs and outputs (its ``(H, D)`` replaces
            ``action_shape``); None when no model is named.
        prepare_s: emulated CPU preparation time (s).
        output_s: emulated CPU output time (s); default: the table's ``h_out``.
        noise: log-normal sigma of per-unit work (0: exact).
        seed: noise seed.
    """

    name = "emulated"
    emulated = True
    device = "emulated"

    def __init__(
        self,
        table: RateTable | None = None,
        clock: Clock | None = None,
        *,
        action_shape: tuple[int, int] = (HORIZON, ACTION_DIM),
        io: ModelIO | None = None,
        prepare_s: float = 0.0,
        output_s: float | None = None,
        noise: float = 0.0,
        seed: int = 0,
    ) -> None:
        self.table = table if table is not None else default_rate_table()
        self.clock = clock if clock is not None else Clock()
        self.io = io
        shape = io.action_shape if io is not None else action_shape
        self.action_shape = (int(shape[0]), int(shape[1]))
        self.prepare_s = float(prepare_s)
        self.output_s = self.table.h_out if output_s is None else float(output_s)
        self.gpu = EmulatedDevice(self.table, self.clock, noise=noise, seed=seed)
        _LOG.info("%s work_ms=%s overhead_ms=%s", EMULATION_NOTICE,
                  [round(w * 1e3, 3) for w in self.table.work],
                  [round(h * 1e3, 3) for h in self.table.overhead])

    def bind_clock(self, clock: Clock) -> None:
        """Use the engine's clock (the device must share the engine's time base)."""
        self.clock = clock
        self.gpu.clock = clock

    def prepare(self, inputs: RequestInputs, request_id: int, robot_id: str) -> EmulatedState:
        """Read the request's ``seed`` (default: its id) and ``work_factor``.

        ``work_factor`` (> 0) scales the request's work in every stage: an emulated
        heavier or lighter request (fault and ordering tests).
        """
        factor = inputs.work_factor
        if not 0 < factor < math.inf:
            raise InputValidationError("work_factor", f"must be a number > 0, got {factor!r}")
        seed = request_id if inputs.seed is None else inputs.seed
        self.clock.sleep(self.prepare_s)
        return EmulatedState(request_id, robot_id, seed, work_factor=float(factor))

    def run_stage(self, stage: Stage, state: EmulatedState, lane: LaneInfo | None) -> None:
        """Occupy the emulated device for one unit of ``stage``."""
        if state.next_stage != int(stage):
            raise RuntimeError(f"emulated request {state.request_id}: cannot run {stage.name}, "
                               f"next stage is {Stage(state.next_stage).name}")
        issued = lane.issued_at if lane is not None else None
        _, end = self.gpu.execute(stage, state.work_factor, issued)
        state.next_stage += 1
        if stage is Stage.ACTION:
            state.action_end = end

    def finish(self, state: EmulatedState) -> np.ndarray:
        """Deterministic placeholder chunk (NOT model output), shape ``(H, D)``.

        Output processing ends ``output_s`` after the Action unit ended (as ``h_out``
        in the table), however late this CPU thread started.
        """
        end = state.action_end
        if not math.isnan(end):
            self.clock.sleep_until(end + self.output_s)
        else:
            self.clock.sleep(self.output_s)
        return placeholder_actions(self.action_shape, state.seed)

    def example_inputs(self, robot_index: int, previous: np.ndarray | None) -> RequestInputs:
        """Emulated inputs carry only a seed."""
        return RequestInputs(seed=robot_index)

    def state_factory(self) -> StateFactory[EmulatedState]:
        """States positioned at any stage (calibration of the emulator itself)."""
        def fresh(stage: Stage) -> EmulatedState:
            return EmulatedState(-1, "calibration", 0, int(stage))
        return fresh

    def describe(self) -> dict[str, Any]:
        """Report entry; says it is emulation."""
        d = super().describe()
        d["notice"] = EMULATION_NOTICE
        d["rate_table"] = self.table.provenance
        return d


def placeholder_actions(shape: tuple[int, int], seed: int) -> np.ndarray:
    """A deterministic, smooth ``shape`` array derived from ``seed`` (emulation only)."""
    h, d = shape
    k = np.arange(h, dtype=np.float64)[:, None]
    j = np.arange(d, dtype=np.float64)[None, :]
    phase = (seed % 997) * 0.01
    return 0.01 * np.sin(0.2 * k + 0.5 * j + phase)
