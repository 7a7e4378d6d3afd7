"""Predicted cost of a stage batch of 1..N units, read from a rate table (issue 28, item 2).

A rate table has a batch dimension when the engine calibrated it with batches
(``xinfer-calibrate --max-batch N`` stores ``model.settings.max_batch = N``). Such a
table's ρ_s(n) counts *units*, the ``n_s + 1`` units of stage s split evenly into
batches of at most N over ``ceil((n_s + 1) / N)`` lanes (:func:`~xinfer_ros.core.batching.
batch_sizes`). So while ``k <= N`` units fit one batch, a stage-s batch of ``k`` units
with the load ``n`` of *other* running units around it is measured directly as

    d_s(k, n) = h_s + W_s / ρ_s(n + (k − 1) e_s)

(its ``k − 1`` mates are the "other units held running" of the calibration). This is the
batch dimension: no new file field, and the engine, the policy and the simulator read the
same cell through :class:`~xinfer_ros.core.predictor.Predictor`'s ``q`` table (online
correction included). The dimension stops at ``min(N, c_s + 1)``: beyond the table's
bound c_s the cell would be clipped, not measured.

**Batch factors** (``xinfer-calibrate --max-batch N --batch-factors``, which stores
``model.settings.batch_factors``): the table's ρ_s(n) is then an unbatched table's, one
unit per lane with ``n`` other units running, and a batch of ``k`` costs its stage's
isolated work times a measured factor f_s(k) (a batch of k alone over one unit alone):

    d_s(k, n) = h_s + f_s(k) · W_s / ρ_s(n)

So units the policy runs one per lane are priced exactly as unbatched XInfer prices
them, and only a formed batch is priced as one; the dimension reaches N at every stage
(mates do not enter ``n``). The even-split cells above disagree with unbatched serving
on the states it visits by up to 24 % on Action (docs/BENCHMARKS.md 5.3), which is
what this form removes. Its assumption: a batch's own mates do not slow it (f_s(k)
prices them), while to the other running units its members still count one each. The
progress tracker integrates a running batch's members as units (ρ(n − e_s)), so its
remaining times for running batches do not use the factors. Only batch-forming policies
read them; :func:`~xinfer_ros.core.rate_table.load_rate_table` checks them on every read.

**Feedback** (an experiment, :meth:`BatchCost.observe`): the engine may report each
formed batch's observed forward against the duration its plan used. A per-stage factor
c_s, learned as the online rate correction learns its factors (geometric EWMA, clipped,
with a deadband: :class:`~xinfer_ros.core.rate_correction.RateCorrection`), then
scales every d_s(k, n), so formation and the pressure test price batches as the device
has been running them. On the CPU engine fill-slots formation predicted its batches
1.3-1.45x longer than they ran, at every size (docs/BENCHMARKS.md section 5.3).
With ``by_size`` the factor is learned per stage *and batch size*, c_s(k), each size
from its own batches (its factor stays 1 until it has had ``min_samples`` of them):
under one c_s per stage the audit still read 0.72–1.13 across sizes, since most formed
batches are single units and pull c_s to their own error.

A table without ``settings.max_batch`` (the paper's default, every unbatched calibration)
states batch size 1 only. Asking it for batches is refused at start
(:func:`check_batch_table`, one line naming the table) rather than extrapolated: an
unbatched table's ρ_s(n) measures units on *separate* lanes, which says nothing about
one stacked forward.
"""

from __future__ import annotations

import math

from xinfer_ros.core.errors import RateTableError
from xinfer_ros.core.predictor import Predictor
from xinfer_ros.core.rate_correction import CorrectionSummary, RateCorrection
from xinfer_ros.core.rate_table import (
    BatchFactors,
    RateTable,
    batch_factors,
    calibrated_max_batch,
)

__all__ = ["BatchCost", "BatchFactors", "batch_factors", "calibrated_max_batch",
           "check_batch_table", "table_batch_bound"]


#: Most loads :meth:`BatchCost.durations` keeps (loads are bounded by the slots, so a
#: live policy stays far below; the bound only keeps a misuse from growing memory).
_MEMO_LIMIT = 4096


def table_batch_bound(table: RateTable) -> tuple[int, int, int]:
    """Largest batch per stage whose cost the table measures.

    ``min(N, c_s + 1)`` for even-split cells (mates enter ``n``); N with batch factors.
    """
    n = calibrated_max_batch(table)
    if batch_factors(table) is not None:
        return (n, n, n)
    c = table.bounds
    return (min(n, c[0] + 1), min(n, c[1] + 1), min(n, c[2] + 1))


def check_batch_table(table: RateTable, max_batch: int, source: str) -> None:
    """Refuse a ``max_batch`` the table cannot cost, with one line naming ``source``.

    Raises:
        RateTableError: ``max_batch`` above the smallest stage bound of
            :func:`table_batch_bound`, or below one.
    """
    if isinstance(max_batch, bool) or not isinstance(max_batch, int) or max_batch < 1:
        raise RateTableError(f"{source}: max_batch must be an integer >= 1, got {max_batch!r}")
    bound = min(table_batch_bound(table))
    if max_batch > bound:
        how = ("it states batch size 1 only (calibrated without --max-batch)" if bound == 1
               else f"it measures batches of at most {bound}")
        raise RateTableError(
            f"{source}: max_batch {max_batch} needs a rate table with a batch dimension; "
            f"{how}: recalibrate with xinfer-calibrate --max-batch {max_batch} or set "
            f"max_batch <= {bound}")


class BatchCost:
    """d_s(k, n): the predicted duration of a stage-s batch of k units (see module doc).

    Args:
        predictor: its ``q`` table gives the cells (with the online correction).
        max_batch: most units per batch; checked against the table.
        source: names the table in the error.
        table: the table whose batch dimension is checked (default: the predictor's;
            pass the calibrated one when the predictor runs the no-interference
            ablation, whose isolated copy keeps no calibration settings).
        by_size: learn the feedback factor per batch size, c_s(k), not one per stage.

    Raises:
        RateTableError: when the table cannot cost batches of ``max_batch``.
    """

    __slots__ = ("_durations", "_q_tab", "_scale", "by_size", "factors", "feedback",
                 "max_batch", "predictor")

    def __init__(self, predictor: Predictor, max_batch: int, source: str = "rate table",
                 table: RateTable | None = None, *, by_size: bool = False) -> None:
        calibrated = predictor.table if table is None else table
        check_batch_table(calibrated, max_batch, source)
        self.predictor = predictor
        self.max_batch = max_batch
        #: f_s(k) when the table has batch factors; None for even-split cells.
        self.factors: BatchFactors | None = batch_factors(calibrated)
        #: :meth:`durations` by ``(stage, n)``, valid while the predictor's ``q`` table is
        #: the object in ``_q_tab`` (an online correction swaps in a new table).
        self._durations: dict[tuple[int, int, int, int], tuple[float, ...]] = {}
        self._q_tab: object = predictor.q_tab
        #: Learn c_s(k) per batch size, not one c_s per stage.
        self.by_size = bool(by_size)
        #: Learns c_s from observed batches (:meth:`observe`), one per batch size with
        #: ``by_size`` (index k − 1), else one in total; empty until the first.
        self.feedback: list[RateCorrection] = []
        #: c_s(k) by size (index k − 1, every size alike without ``by_size``): 1 until
        #: feedback publishes a factor.
        self._scale: list[tuple[float, float, float]] = [(1.0, 1.0, 1.0)] * max_batch

    @property
    def scale(self) -> tuple[float, float, float]:
        """c_s of single units: the factor feedback applies to d_s(1, n) (1 without)."""
        return self._scale[0]

    @property
    def scales(self) -> list[tuple[float, float, float]]:
        """c_s(k) for k = 1..max_batch (all alike without ``by_size``)."""
        return list(self._scale)

    def feedback_summary(self) -> CorrectionSummary | None:
        """What feedback learned (of single units with ``by_size``); None before any batch."""
        return self.feedback[0].summary() if self.feedback else None

    def size_factors(self) -> dict[str, list[float]] | None:
        """c_s(k) by batch size (as a string) with ``by_size``; None otherwise or before any."""
        if not self.by_size or not self.feedback:
            return None
        return {str(k): list(c) for k, c in enumerate(self._scale, start=1)}

    def observe(self, stage: int, predicted: float, observed: float, size: int = 1) -> None:
        """Feed back one formed batch: ``predicted`` (its plan's d_s, s) against the forward.

        The observation is ``observed`` over the unscaled prediction (the current
        factor divided out), so the factor converges to where the plans' median error
        is one. A prediction or forward that is not positive and finite, or a ``size``
        outside 1..max_batch, is ignored.
        """
        if not (0.0 < predicted < math.inf and 0.0 < observed < math.inf
                and 1 <= size <= self.max_batch):
            return
        at = size - 1 if self.by_size else 0
        if not self.feedback:
            self.feedback = [RateCorrection() for _ in range(self.max_batch if self.by_size
                                                             else 1)]
        corr = self.feedback[at]
        if corr.observe(stage, observed / (predicted / self._scale[size - 1][stage])):
            if self.by_size:
                self._scale[at] = corr.factors
            else:
                self._scale = [corr.factors] * self.max_batch
            self._durations.clear()

    def duration(self, stage: int, k: int, n: tuple[int, int, int]) -> float:
        """d_s(k, n): ``k`` units as one batch among ``n`` other running units (s).

        Raises:
            ValueError: ``k`` outside 1..max_batch.
        """
        if not 1 <= k <= self.max_batch:
            raise ValueError(f"batch size must be in 1..{self.max_batch}, got {k!r}")
        pred = self.predictor
        if self.factors is not None:
            return self.durations(stage, n)[k - 1]  # the formula lives there, memoised
        mates = (n[0] + (k - 1) * (stage == 0), n[1] + (k - 1) * (stage == 1),
                 n[2] + (k - 1) * (stage == 2))
        return pred.q_tab[pred.index(mates)][stage] * self._scale[k - 1][stage]

    def durations(self, stage: int, n: tuple[int, int, int]) -> tuple[float, ...]:
        """``(d_s(1, n), ..., d_s(max_batch, n))``: one lookup per size, for formation.

        Memoised: the policy asks at every decision with waiting units, for a handful of
        loads; the memo is dropped whenever the predictor's ``q`` table is replaced.
        """
        pred = self.predictor
        q = pred.q_tab
        memo = self._durations
        if q is not self._q_tab or len(memo) >= _MEMO_LIMIT:
            memo.clear()
            self._q_tab = q
        key = (stage, n[0], n[1], n[2])
        out = memo.get(key)
        if out is None and self.factors is not None:
            h = pred.h[stage]
            work = q[pred.index(n)][stage] - h
            scale = self._scale
            out = tuple((h + f * work) * scale[k][stage]
                        for k, f in enumerate(self.factors[stage][:self.max_batch]))
            memo[key] = out
        if out is None:
            index, scale = pred.index, self._scale
            out = tuple(q[index((n[0] + k * (stage == 0), n[1] + k * (stage == 1),
                                 n[2] + k * (stage == 2)))][stage] * scale[k][stage]
                        for k in range(self.max_batch))
            memo[key] = out
        return out
