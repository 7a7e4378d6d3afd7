"""The report of ``xinfer-bench engine``, typed until it is written as JSON.

``to_dict`` gives the keys, order and values the benchmark always wrote. The parts the
engine and core summarise themselves (backend, config, prediction audit, rate
correction) keep the TypedDicts their makers declare. ROS-free.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, TypedDict

from xinfer_ros.core.batch_audit import BatchAuditSummary
from xinfer_ros.core.metrics import WindowMetrics
from xinfer_ros.core.prediction_audit import AuditSummary
from xinfer_ros.core.rate_correction import CorrectionSummary
from xinfer_ros.core.saturation import SaturationSummary
from xinfer_ros.engine.batching import BatchCounts
from xinfer_ros.engine.interleave import InterleaveReport
from xinfer_ros.engine.lateness import LatenessRow
from xinfer_ros.engine.speed_probe import SpeedSummary

__all__ = ["CorrectedSimulation", "Dispatcher", "EngineReport", "PairRow", "SimulatorRun"]

#: A JSON object as the report writes it.
JsonDict = dict[str, object]


class PairRow(TypedDict):
    """One pair of ``--pairs``: the baseline arm against the other."""

    pair: int
    # The arms in the order they ran.
    order: list[str]
    baseline_rps: float
    arm_rps: float
    # arm_rps / baseline_rps (NaN: the baseline served nothing).
    ratio: float
    baseline_p50_ms: float
    arm_p50_ms: float
    baseline_attainment: float
    arm_attainment: float
    # The 1-minute load average after the pair's second run.
    load_average: float


class Dispatcher(TypedDict):
    """The dispatcher's cost over the run."""

    decisions: int
    decision_ms_total: float
    fast_path_steps: int  # steps taken off the dispatcher thread while the engine was idle
    fast_path_units: int  # units the fast lane ran back to back (no lane hand-off)


@dataclass(frozen=True)
class CorrectedSimulation:
    """The simulator again, on the table with the engine's learned slowdown applied."""

    # The engine's published rate-correction factors k_s (V, P, A) at the end of the run.
    factors: tuple[float, float, float]
    metrics: WindowMetrics

    def to_dict(self) -> JsonDict:
        """The ``simulator.corrected`` entry."""
        return {"factors": list(self.factors), "metrics": self.metrics.to_dict()}


@dataclass(frozen=True)
class SimulatorRun:
    """The closed-loop simulator's run of the same policy, workload, seed and table."""

    # Which settings it ran with, in words.
    config: str
    metrics: WindowMetrics
    # Set when the engine learned factors other than 1: how far the table's speed, rather
    # than what the simulator leaves out, explains engine - simulator. Learned on the
    # same run, so an explanation, not a prediction.
    corrected: CorrectedSimulation | None = None

    def to_dict(self) -> JsonDict:
        """The report's ``simulator`` entry."""
        out: JsonDict = {"config": self.config, "metrics": self.metrics.to_dict()}
        if self.corrected is not None:
            out["corrected"] = self.corrected.to_dict()
        return out


@dataclass
class EngineReport:
    """One closed-loop engine benchmark run."""

    benchmark: ClassVar[str] = "engine"
    # Whether the backend was the emulated one, and its notice ("" when not).
    emulated: bool
    notice: str
    # Backend.describe().
    backend: JsonDict
    # The engine mode or ablation that ran.
    engine: str
    # EngineConfig.to_dict().
    config: JsonDict
    policy: str
    workload: str
    robots: int
    duration_s: float
    # Requests sent in [start, end) s were measured.
    window_s: tuple[float, float]
    # The rate table's file ("default": the shipped one) and where its figures come from.
    rate_table: str
    rate_table_provenance: str
    # Emulated time runs this much faster than the wall clock.
    time_scale: float
    phase_spread: bool
    # Responses held back by phase spreading.
    held: int
    # The machine, and its load average (1, 5, 15 min) when the run ended.
    host: str
    load_average: list[float]
    metrics: WindowMetrics
    # Per stage (and queue, total): mean, p50 and p95 of the server time (ms).
    stage_ms: dict[str, dict[str, float]]
    prediction: AuditSummary
    # None: correction off.
    rate_correction: CorrectionSummary | None
    # Answers by engine status name ("UNANSWERED" included).
    statuses: dict[str, int]
    dispatcher: Dispatcher
    # With --compare-sim.
    simulator: SimulatorRun | None = None
    # Set by --pairs: the pair's number; by the GPU suite: the run's wall time (s); by
    # both: the arm's label.
    pair: int | None = None
    wall_s: float | None = None
    arm: str | None = None
    # How fast the host's cores ran in the window (None: --no-speed-probe, or no sample).
    speed_probe: SpeedSummary | None = None
    # Forwards each stage started in the window, by stage and batch size
    # (BatchSizes.snapshot); None: not recorded.
    batches: BatchCounts | None = None
    # Formed batches' observed against predicted durations, by stage and size
    # (BatchAudit.summary); None: the policy formed no batch, or not recorded.
    batch_audit: BatchAuditSummary | None = None
    # The batch-cost factors c_s the policy's feedback learned (batch_feedback; with
    # batch_feedback_by_size, those of single units); None: feedback off, or no batch
    # observed.
    batch_feedback: CorrectionSummary | None = None
    # With batch_feedback_by_size: the factors c_s(k) by batch size k; else None.
    batch_feedback_sizes: dict[str, list[float]] | None = None
    # Late and on-time requests' server time by part, per budget class (ms key);
    # None: not recorded.
    lateness: dict[str, LatenessRow] | None = None
    # With saturation_switch: what its meter read and decided; else None.
    saturation: SaturationSummary | None = None
    # With --interleave: the arms compared cycle by cycle; else None.
    interleave: InterleaveReport | None = None

    def to_dict(self) -> JsonDict:
        """The JSON report, keys in the order the benchmark always wrote them."""
        out: JsonDict = {
            "benchmark": self.benchmark, "emulated": self.emulated, "notice": self.notice,
            "backend": self.backend, "engine": self.engine, "config": self.config,
            "policy": self.policy, "workload": self.workload, "robots": self.robots,
            "duration_s": self.duration_s, "window_s": list(self.window_s),
            "rate_table": self.rate_table, "rate_table_provenance": self.rate_table_provenance,
            "time_scale": self.time_scale, "phase_spread": self.phase_spread,
            "held": self.held, "host": self.host, "load_average": list(self.load_average),
            "metrics": self.metrics.to_dict(), "stage_ms": self.stage_ms,
            "prediction": self.prediction, "rate_correction": self.rate_correction,
            "statuses": self.statuses, "dispatcher": self.dispatcher,
        }
        if self.simulator is not None:
            out["simulator"] = self.simulator.to_dict()
        for key in ("pair", "wall_s", "arm"):
            if (value := getattr(self, key)) is not None:
                out[key] = value
        if self.speed_probe is not None:
            out["speed_probe"] = self.speed_probe.to_dict()
        if self.batches is not None:
            out["batches"] = self.batches
        if self.batch_audit is not None:
            out["batch_audit"] = self.batch_audit
        if self.batch_feedback is not None:
            out["batch_feedback"] = self.batch_feedback
        if self.batch_feedback_sizes is not None:
            out["batch_feedback_sizes"] = self.batch_feedback_sizes
        if self.lateness is not None:
            out["lateness"] = self.lateness
        if self.saturation is not None:
            out["saturation"] = self.saturation
        if self.interleave is not None:
            out["interleave"] = self.interleave.to_dict()
        return out
