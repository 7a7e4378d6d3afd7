"""How well a formed batch's predicted duration matched the forward that ran (issue 28).

A batch-forming policy (:meth:`~xinfer_ros.core.xinfer_policy.XInferPolicy.plan_batch`)
admits a mate only while the batch's predicted duration d_s(k, n)
(:mod:`~xinfer_ros.core.batch_cost`) keeps every member in time. If the device runs
batches of k relatively slower than the table says, formation makes tight members late
while believing it keeps them; the stage-wide online correction
(:mod:`~xinfer_ros.core.rate_correction`) cannot show this, since it learns one factor
per stage over all sizes. This audit compares, per stage and batch size, the duration
the plan predicted when the batch was formed with the forward's observed duration
(from its start on a lane to its end). The policy sees a batch end only when the
dispatcher handles it, so the audit also keeps the two lags around the forward: from
formation to the lane's start, and from the forward's end to the dispatcher seeing it
(on a CPU the lanes and the dispatcher share the cores). Nothing here feeds back into
scheduling.

Memory stays bounded on a long-running server: only count, sums and a fixed ring of
the latest ratios are kept per (stage, size).
"""

from __future__ import annotations

import math
import threading
from typing import TypedDict

import numpy as np

from xinfer_ros.core.ring import FloatRing
from xinfer_ros.core.stages import STAGES, Stage
from xinfer_ros.core.timing import MS_PER_S

__all__ = ["BatchAudit", "BatchAuditSummary", "SizeAudit"]

#: Latest observed/predicted ratios kept per (stage, size) for the median.
_RATIOS_KEPT = 4096


class SizeAudit(TypedDict):
    """One stage's batches of one size, within the audit's window."""

    batches: int
    predicted_ms: float  # mean predicted duration at formation
    observed_ms: float  # mean observed forward duration
    start_lag_ms: float  # mean time from formation to the lane starting the forward
    report_lag_ms: float  # mean time from the forward's end to the dispatcher seeing it
    ratio_median: float  # median of observed / predicted over single batches


#: Stage name (``vit``, ``prefill``, ``action``) -> batch size (as a string) -> figures.
BatchAuditSummary = dict[str, dict[str, SizeAudit]]


class _Cell:
    __slots__ = ("count", "observed", "predicted", "ratios", "report_lag", "start_lag")

    def __init__(self) -> None:
        self.count = 0
        self.predicted = 0.0
        self.observed = 0.0
        self.start_lag = 0.0
        self.report_lag = 0.0
        self.ratios = FloatRing(1, _RATIOS_KEPT)


class BatchAudit:
    """Predicted against observed durations of formed batches, by stage and size.

    Batches that started outside ``[keep_from, keep_until)`` (engine seconds, the
    benchmark's window) are not counted, like :class:`~xinfer_ros.engine.batching.
    BatchSizes`. Records come from the dispatcher thread; :meth:`summary` may be read
    from another, hence the lock.
    """

    __slots__ = ("_cells", "_lock", "keep_from", "keep_until")

    def __init__(self) -> None:
        #: Engine times between which batches count.
        self.keep_from = -math.inf
        self.keep_until = math.inf
        self._cells: dict[tuple[int, int], _Cell] = {}
        self._lock = threading.Lock()

    def record(self, stage: Stage | int, size: int, predicted_s: float, started: float,
               ended: float, *, formed: float | None = None, seen: float | None = None) -> None:
        """One formed batch of ``size`` units: its predicted and observed duration (s).

        ``formed`` and ``seen`` (engine seconds; default ``started`` and ``ended``) are
        when the dispatcher formed the batch and handled its end. A batch without a
        usable prediction (not finite or not positive: a plan that fell back after an
        error) or without a forward (``ended < started``) is skipped.
        """
        observed = ended - started
        start_lag = 0.0 if formed is None else max(0.0, started - formed)
        report_lag = 0.0 if seen is None else max(0.0, seen - ended)
        if (not self.keep_from <= started < self.keep_until or size < 1
                or not math.isfinite(predicted_s) or predicted_s <= 0.0 or observed < 0.0):
            return
        with self._lock:
            cell = self._cells.get((int(stage), size))
            if cell is None:
                cell = self._cells[(int(stage), size)] = _Cell()
            cell.count += 1
            cell.predicted += predicted_s
            cell.observed += observed
            cell.start_lag += start_lag
            cell.report_lag += report_lag
            cell.ratios.append((observed / predicted_s,))

    def summary(self) -> BatchAuditSummary:
        """Per stage and size: count, mean durations and lags (ms), the median ratio."""
        out: BatchAuditSummary = {}
        with self._lock:
            for (s, size), cell in sorted(self._cells.items()):
                ratios = cell.ratios.rows()[:, 0]
                out.setdefault(STAGES[s].name.lower(), {})[str(size)] = SizeAudit(
                    batches=cell.count,
                    predicted_ms=cell.predicted / cell.count * MS_PER_S,
                    observed_ms=cell.observed / cell.count * MS_PER_S,
                    start_lag_ms=cell.start_lag / cell.count * MS_PER_S,
                    report_lag_ms=cell.report_lag / cell.count * MS_PER_S,
                    ratio_median=float(np.median(ratios)))
        return out
