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
kind (the summary describes those), in rings allocated at once
(:class:`~xinfer_ros.core.ring.FloatRing`), so its memory does not grow as they fill;
the simulator's finite runs keep every one.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TypedDict, overload

import numpy as np

from xinfer_ros.core.policy import Policy
from xinfer_ros.core.ring import FloatRing
from xinfer_ros.core.stages import STAGES, Stage

__all__ = ["AuditSummary", "IncludingOutput", "PredictionAudit", "PredictionSample", "Samples",
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


#: The columns of a stored :class:`PredictionSample`, in :class:`FloatRing` order.
_REQUEST, _STAGE, _T, _PREDICTED, _ACTUAL, _DURATION = range(6)


class Samples(Sequence[PredictionSample]):
    """Resolved forecasts, oldest first, stored as rows of floats.

    Args:
        maxlen: forecasts kept, the latest (None: all).
    """

    def __init__(self, maxlen: int | None) -> None:
        self._ring = FloatRing(6, maxlen)

    @property
    def maxlen(self) -> int | None:
        """The bound (None: unbounded)."""
        return self._ring.maxlen

    def append(self, sample: PredictionSample) -> None:
        """Keep ``sample`` (the oldest gives way once a bounded store is full)."""
        self._ring.append((sample.request_id, int(sample.stage), sample.t, sample.predicted,
                           sample.actual, sample.duration))

    def __len__(self) -> int:
        return len(self._ring)

    @overload
    def __getitem__(self, index: int) -> PredictionSample: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[PredictionSample]: ...

    def __getitem__(self, index: int | slice) -> PredictionSample | Sequence[PredictionSample]:
        if isinstance(index, slice):
            return [_sample(row) for row in self._ring.rows()[index]]
        return _sample(self._ring.row(index))

    def __iter__(self) -> Iterator[PredictionSample]:
        return (_sample(row) for row in self._ring.rows())

    def array(self) -> np.ndarray:
        """Every kept forecast as rows (request, stage, t, predicted, actual, duration)."""
        return self._ring.rows()


def _sample(row: np.ndarray) -> PredictionSample:
    return PredictionSample(int(row[_REQUEST]), Stage(int(row[_STAGE])), float(row[_T]),
                            float(row[_PREDICTED]), float(row[_ACTUAL]),
                            float(row[_DURATION]))


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
        self.samples = Samples(max_samples)
        #: Action forecasts resolved at the end of output processing (+ h_out).
        self.output_samples = Samples(max_samples)

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
        rows = self.samples.array()
        err = _errors_ms(rows)
        mean_dur = _mean_unit_duration_ms(rows)
        out["mae_ms"] = float(np.mean(np.abs(err)))
        out["mean_error_ms"] = float(np.mean(err))
        out["p95_abs_error_ms"] = float(np.percentile(np.abs(err), 95))
        out["mean_stage_duration_ms"] = mean_dur
        out["mae_rel_mean_stage"] = (float(np.mean(np.abs(err))) / mean_dur if mean_dur else
                                     math.nan)
        per: dict[str, StageAudit] = {}
        for s in STAGES:
            sel = rows[rows[:, _STAGE] == int(s)]
            if not len(sel):
                continue
            e = _errors_ms(sel)
            per[s.name.lower()] = {"samples": len(sel), "mae_ms": float(np.mean(np.abs(e))),
                                   "mean_error_ms": float(np.mean(e)),
                                   "mean_duration_ms": _mean_unit_duration_ms(sel)}
        out["per_stage"] = per
        if self.output_samples:
            # The earlier definition: Action resolved at the end of output processing.
            outputs = self.output_samples.array()
            legacy = np.concatenate([rows[rows[:, _STAGE] != int(Stage.ACTION)], outputs])
            e = _errors_ms(legacy)
            mean_d = _mean_unit_duration_ms(legacy)
            ea = _errors_ms(outputs)
            out["incl_output"] = {
                "mae_ms": float(np.mean(np.abs(e))), "mean_error_ms": float(np.mean(e)),
                "mean_stage_duration_ms": mean_d,
                "mae_rel_mean_stage": float(np.mean(np.abs(e))) / mean_d if mean_d else math.nan,
                "action_mae_ms": float(np.mean(np.abs(ea))),
                "action_mean_error_ms": float(np.mean(ea))}
        return out


def _errors_ms(rows: np.ndarray) -> np.ndarray:
    """Signed errors (ms) of stored forecasts (:attr:`PredictionSample.error`)."""
    errors: np.ndarray = (rows[:, _ACTUAL] - rows[:, _PREDICTED]) * 1e3
    return errors


def _mean_unit_duration_ms(rows: np.ndarray) -> float:
    """Mean duration (ms) over the units the forecasts describe, each unit once."""
    keys = rows[:, _REQUEST] * len(STAGES) + rows[:, _STAGE]
    _, first = np.unique(keys, return_index=True)
    return float(np.mean(rows[np.sort(first), _DURATION])) * 1e3
