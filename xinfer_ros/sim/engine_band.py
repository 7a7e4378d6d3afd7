"""How far the simulator was from the real-time engine on one rate table: the planner's band.

``xinfer-bench engine --compare-sim --json FILE`` serves a closed-loop fleet with the
real engine and simulates the same policy, workload, seed, slots and table beside it;
its JSON holds both attainments. Over a few such runs the engine's attainment minus the
simulator's is the simulator's error on that table: on the CPU tables it ranges from
about +2 to -51 points (docs/BENCHMARKS.md, section 5.3), so a plan the simulator
alone draws can promise robots a server does not keep in budget.

:func:`load_band` reads those runs for one plan and refuses any that does not describe
it (another policy, workload, table, slots, batch size or phase spreading): a gap
measured on another setting says nothing about this one. :meth:`EngineBand.target`
turns the band into the attainment the simulator must show so that the engine, at the
band's worse end, still reaches the plan's target.

The band is the gap between the engine and the bench's own simulation of it (the
bench's noise, tick and link delays); the plan simulates with its own flags, so
setting those far from the bench's adds an error the band does not measure.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from xinfer_ros.errors import XInferRosError

__all__ = ["EngineBand", "EngineBandError", "EngineCheck", "PlanSetting", "load_band"]


class EngineBandError(XInferRosError, ValueError):
    """An engine run cannot serve as the band of this plan (the message names the file)."""


@dataclass(frozen=True)
class PlanSetting:
    """What a plan simulates; an engine run must have run the same to bound its error.

    Attributes:
        policy: Scheduling policy name.
        workload: Workload name.
        provenance: The rate table's provenance line (names its calibration run).
        slots: Execution slots per stage.
        max_batch: Largest batch of one stage unit.
        phase_spread: Whether phase-spreading release is on.
    """

    policy: str
    workload: str
    provenance: str
    slots: tuple[int, int, int]
    max_batch: int
    phase_spread: bool


@dataclass(frozen=True)
class EngineCheck:
    """One ``xinfer-bench engine --compare-sim`` run.

    Attributes:
        path: The JSON it came from.
        robots: Closed-loop robots served.
        engine: The engine's attainment (0..1).
        simulator: The simulator's attainment on the same setting (0..1).
    """

    path: str
    robots: int
    engine: float
    simulator: float

    @property
    def gap(self) -> float:
        """Engine minus simulator attainment (negative: the simulator promised more)."""
        return self.engine - self.simulator


@dataclass(frozen=True)
class EngineBand:
    """The simulator's measured error on one plan's setting.

    Attributes:
        checks: The runs, in the order given.
    """

    checks: tuple[EngineCheck, ...]

    @property
    def low(self) -> float:
        """The most negative gap (engine below simulator), as a fraction."""
        return min(c.gap for c in self.checks)

    @property
    def high(self) -> float:
        """The most positive gap, as a fraction."""
        return max(c.gap for c in self.checks)

    @property
    def robots(self) -> tuple[int, ...]:
        """The robot counts the runs measured, sorted, once each."""
        return tuple(sorted({c.robots for c in self.checks}))

    def target(self, target: float) -> float:
        """The simulated attainment at which the engine still reaches ``target``.

        Only the band's worse end moves it: where the engine did better than the
        simulator, the plan keeps the simulator's verdict. Above 1 no simulated run can
        pass, which is the honest answer for a table the simulator misjudges that much.
        """
        return target - min(self.low, 0.0)

    def to_dict(self) -> dict[str, object]:
        """JSON-ready form (gaps in attainment points)."""
        return {"low_points": 100 * self.low, "high_points": 100 * self.high,
                "robots": list(self.robots),
                "runs": [{"path": c.path, "robots": c.robots, "engine": c.engine,
                          "simulator": c.simulator} for c in self.checks]}


def load_band(paths: Sequence[str | Path], setting: PlanSetting) -> EngineBand:
    """Read ``xinfer-bench engine --compare-sim`` JSONs that ran ``setting``.

    Raises:
        EngineBandError: When no path is given, a file cannot be read, holds no
            simulator run, or ran another setting than the plan's.
    """
    if not paths:
        raise EngineBandError("no engine run given")
    return EngineBand(tuple(_check(Path(p), setting) for p in paths))


def _check(path: Path, setting: PlanSetting) -> EngineCheck:
    """One run, validated against the plan."""
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise EngineBandError(f"{path}: cannot read an engine run ({exc})") from exc
    if not isinstance(data, dict) or data.get("benchmark") != "engine":
        raise EngineBandError(f"{path}: not the JSON of xinfer-bench engine")
    sim = data.get("simulator")
    if not isinstance(sim, dict):
        raise EngineBandError(f"{path}: no simulator run beside the engine (run xinfer-bench "
                              "engine with --compare-sim)")
    config = data.get("config") or {}
    ran = {"policy": data.get("policy"), "workload": data.get("workload"),
           "rate table": data.get("rate_table_provenance"),
           "slots": _slots(config.get("slots")), "max batch": config.get("max_batch"),
           "phase spreading": config.get("phase_spread")}
    wanted = {"policy": setting.policy, "workload": setting.workload,
              "rate table": setting.provenance, "slots": setting.slots,
              "max batch": setting.max_batch, "phase spreading": setting.phase_spread}
    for what, value in wanted.items():
        if ran[what] != value:
            raise EngineBandError(f"{path}: the engine ran {what} {_show(ran[what])}, the plan "
                                  f"{_show(value)}")
    try:
        return EngineCheck(str(path), int(data["robots"]),
                           float(data["metrics"]["attainment"]),
                           float(sim["metrics"]["attainment"]))
    except (KeyError, TypeError, ValueError) as exc:
        raise EngineBandError(f"{path}: no attainment of the engine and the simulator "
                              f"({exc!r})") from exc


def _slots(value: Any) -> tuple[int, ...] | None:
    """Slots as the plan holds them (JSON gives a list)."""
    return tuple(value) if isinstance(value, (list, tuple)) else None


def _show(value: object) -> str:
    """A setting's value in an error line."""
    if isinstance(value, tuple):
        return ",".join(str(v) for v in value)
    return repr(value) if isinstance(value, str) else str(value)
