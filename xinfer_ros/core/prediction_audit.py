"""Causal audit of running-stage remaining-time predictions (paper App. C.2, Eq. 11).

At the first policy decision at least ``period`` after the previous sample, every
running unit's remaining time is predicted with Eq. 9 from the policy's own progress
tracker, which integrates only the launches and completions observed before that
instant, at the decision's final foreseeable load ``n_f``. When the sampled stage's
end is observed by the dispatcher (the same instant the policy is told of the
completion, for every stage), the signed error ``e = t_end − t − r̂`` is recorded
(positive = under-prediction). Nothing here feeds back into scheduling. The engine
and the simulator run this same audit, so their MAE figures mean the same thing.

Action's forecasts are also resolved a second time at the end of its CPU output
processing, with the fixed ``h_out`` added (the ``incl_output`` figures, the audit's
earlier definition). That end includes waiting for a CPU worker and, with CPU overlap
off, for whatever model unit the dispatcher launched meanwhile: time the running-stage
residual r̃ (Eq. 9) does not describe, which is why the main figures stop at the
stage's own end.

An engine that serves for days keeps only its latest ``max_samples`` forecasts of each
kind (the summary describes those); the simulator's finite runs keep every one.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import TypedDict

import numpy as np

from xinfer_ros.core.policy import Policy
from xinfer_ros.core.stages import STAGES, Stage

__all__ = ["AuditSummary", "IncludingOutput", "PredictionAudit", "PredictionSample",
           "StageAudit"]


class StageAudit(TypedDict):
    """One stage's forecast errors (ms)."""

    samples: int
    mae_ms: float
    mean_error_ms: float
    mean_duration_ms: float


class IncludingOutput(TypedDict):
    """Errors under the earlier definition: Action resolved after output processing."""

    mae_ms: float
    mean_error_ms: float
    mean_stage_duration_ms: float
    mae_rel_mean_stage: float
    action_mae_ms: float
    action_mean_error_ms: float


class _AuditCount(TypedDict):
    samples: int


class AuditSummary(_AuditCount, total=False):
    """:meth:`PredictionAudit.summary`; only ``samples`` while there are none."""

    mae_ms: float
    mean_error_ms: float
    p95_abs_error_ms: float
    mean_stage_duration_ms: float
    mae_rel_mean_stage: float
    #: By lower-case stage name, stages with samples only.
    per_stage: dict[str, StageAudit]
    incl_output: IncludingOutput


@dataclass(frozen=True, slots=True)
class PredictionSample:
    """One resolved forecast.

    Attributes:
        request_id: the request.
        stage: the running stage.
        t: forecast time (s).
        predicted: r̂_{j,s}(t) (s).
        actual: t_end − t (s).
        duration: the unit's observed duration, issue to end (s).
    """

    request_id: int
    stage: Stage
    t: float
    predicted: float
    actual: float
    duration: float

    @property
    def error(self) -> float:
        """Signed error (s); positive means the prediction was too short."""
        return self.actual - self.predicted


class PredictionAudit:
    """Collects and resolves running-stage forecasts.

    Args:
        period: minimum spacing between sampling decisions (s); 0 disables sampling.
        keep_from: forecasts before this time are dropped (warm-up), engine seconds.
        max_samples: resolved forecasts kept of each kind, the latest (None: all).
    """

    def __init__(self, period: float = 0.020, keep_from: float = 0.0,
                 max_samples: int | None = None) -> None:
        if max_samples is not None and max_samples < 1:
            raise ValueError(f"max_samples must be >= 1 or None, got {max_samples!r}")
        self.period = period
        self.keep_from = keep_from
        self._last = -math.inf
        #: (request_id, stage) -> [(t, predicted, issued)]
        self._open: dict[tuple[int, int], list[tuple[float, float, float]]] = {}
        #: Action forecasts (h_out added) awaiting the end of output processing.
        self._open_output: dict[int, list[tuple[float, float, float]]] = {}
        self.samples: deque[PredictionSample] = deque(maxlen=max_samples)
        #: Action forecasts resolved at the end of output processing (+ h_out).
        self.output_samples: deque[PredictionSample] = deque(maxlen=max_samples)

    def maybe_sample(self, policy: Policy, t: float) -> None:
        """Sample every running unit of ``policy`` if the period has elapsed."""
        if self.period <= 0 or t - self._last < self.period or t < self.keep_from:
            return
        self._last = t
        tracker = policy.tracker
        nf = getattr(policy, "foreseeable_load", None)
        n = tuple(nf) if nf is not None else tuple(tracker.counts)
        for unit in tracker.units.values():
            r = tracker.residual(unit, t, n)
            key = (unit.request.request_id, int(unit.stage))
            self._open.setdefault(key, []).append((t, r, unit.issued))

    def observe_end(self, request_id: int, stage: Stage, t_end: float) -> None:
        """The stage's end was observed at ``t_end``: resolve its forecasts."""
        opened = self._open.pop((request_id, int(stage)), ())
        for t, r, issued in opened:
            self.samples.append(PredictionSample(request_id, stage, t, r, t_end - t,
                                                 t_end - issued))
        if stage is Stage.ACTION and opened:
            self._open_output[request_id] = list(opened)

    def observe_output_end(self, request_id: int, t_end: float, h_out: float) -> None:
        """Action's output processing ended at ``t_end``: resolve the ``incl_output`` forecasts."""
        for t, r, issued in self._open_output.pop(request_id, ()):
            self.output_samples.append(PredictionSample(request_id, Stage.ACTION, t, r + h_out,
                                                        t_end - t, t_end - issued))

    def drop(self, request_id: int) -> None:
        """Forget open forecasts of a request that failed or was cancelled."""
        for s in STAGES:
            self._open.pop((request_id, int(s)), None)
        self._open_output.pop(request_id, None)

    def summary(self) -> AuditSummary:
        """MAE (ms), signed mean, and MAE relative to the mean stage duration, per stage."""
        out: AuditSummary = {"samples": len(self.samples)}
        if not self.samples:
            return out
        err = np.array([s.error for s in self.samples]) * 1e3
        # Each unit's duration counts once, however many forecasts it received.
        durations: dict[tuple[int, int], float] = {
            (s.request_id, int(s.stage)): s.duration for s in self.samples}
        mean_dur = float(np.mean(list(durations.values()))) * 1e3
        out["mae_ms"] = float(np.mean(np.abs(err)))
        out["mean_error_ms"] = float(np.mean(err))
        out["p95_abs_error_ms"] = float(np.percentile(np.abs(err), 95))
        out["mean_stage_duration_ms"] = mean_dur
        out["mae_rel_mean_stage"] = (float(np.mean(np.abs(err))) / mean_dur if mean_dur else
                                     math.nan)
        per: dict[str, StageAudit] = {}
        for s in STAGES:
            sel = [x for x in self.samples if x.stage is s]
            if not sel:
                continue
            e = np.array([x.error for x in sel]) * 1e3
            d = {(x.request_id, int(x.stage)): x.duration for x in sel}
            per[s.name.lower()] = {"samples": len(sel), "mae_ms": float(np.mean(np.abs(e))),
                                   "mean_error_ms": float(np.mean(e)),
                                   "mean_duration_ms": float(np.mean(list(d.values()))) * 1e3}
        out["per_stage"] = per
        if self.output_samples:
            # The earlier definition: Action resolved at the end of output processing.
            legacy = [*(x for x in self.samples if x.stage is not Stage.ACTION),
                      *self.output_samples]
            e = np.array([x.error for x in legacy]) * 1e3
            d = {(x.request_id, int(x.stage)): x.duration for x in legacy}
            mean_d = float(np.mean(list(d.values()))) * 1e3
            ea = np.array([x.error for x in self.output_samples]) * 1e3
            out["incl_output"] = {
                "mae_ms": float(np.mean(np.abs(e))), "mean_error_ms": float(np.mean(e)),
                "mean_stage_duration_ms": mean_d,
                "mae_rel_mean_stage": float(np.mean(np.abs(e))) / mean_d if mean_d else math.nan,
                "action_mae_ms": float(np.mean(np.abs(ea))),
                "action_mean_error_ms": float(np.mean(ea))}
        return out
