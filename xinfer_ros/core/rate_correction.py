"""Online correction of the calibrated stage rates from observed unit completions.

A rate table is calibrated once, on a quiet device; at run time the same units may
run uniformly slower or faster (other jobs on a shared CPU, clock boosts, thermal
limits, a different input mix). The predictor (Eq. 8–10) would then be biased for
every unit it forecasts. :class:`RateCorrection` learns one multiplicative factor
``k_s`` per stage from completed units:

* When a stage-``s`` unit completes, the progress tracker has integrated its work
  ``ŵ`` at the *calibrated* rates over its whole observed life (Eq. 9). Had the table
  been exact, ``ŵ = W_s``; a device ``k`` times slower than the table gives
  ``ŵ ≈ k · W_s``. The observation is ``x = ŵ / W_s``.
* ``log k_s`` is an exponentially weighted mean of ``log x`` (a geometric mean, so a
  2x outlier and a 0.5x outlier weigh alike). The first ``min_samples`` observations
  are averaged with equal weights, so the estimate does not start biased towards 1.
* Observations and the factor are clipped to ``bounds``; a factor is published only
  after ``min_samples`` observations of its stage, and re-published only when it moved
  by more than ``deadband`` (relative), so that consumers rebuild their lookup tables
  rarely.
* Beside the factor it keeps the observations' **dispersion**: an exponentially
  weighted mean of ``|log x − log k_s|`` (the deviation from the estimate before the
  observation, same weights), so ``exp(dispersion) − 1`` is a unit's typical relative
  error about the corrected rate. A batch-forming policy uses it to tell a unit late by
  less than the predictor's own error from one that is lost (issue 28).

The predictor applies a published factor by scaling the stage's work, ``W_s → k_s ·
W_s``: every duration and residual it gives (``q_s``, ``R_j``, ``r̃_{j,s}``) then
follows the corrected rate ``ρ_s(n) / k_s``, while the calibrated interference
pattern ``ρ_s(n)`` itself is kept. This module is pure Python (no ROS, no torch).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TypedDict

from xinfer_ros.core.stages import NUM_STAGES

__all__ = ["CorrectionSettings", "CorrectionSummary", "RateCorrection"]


class CorrectionSummary(TypedDict):
    """:meth:`RateCorrection.summary`: per-stage lists in stage order (V, P, A)."""

    factors: list[float]
    estimates: list[float]
    dispersion: list[float]
    samples: list[int]
    alpha: float
    min_samples: int
    bounds: list[float]
    deadband: float


@dataclass(frozen=True, slots=True)
class CorrectionSettings:
    """Parameters of :class:`RateCorrection`.

    Attributes:
        alpha: EWMA weight of a new observation in log space (0 < alpha <= 1). 0.15
            remembers roughly the last dozen units of a stage, i.e. well under a
            second at the engine's unit rates: fast enough to follow load swings of
            other jobs, slow enough to average out unit-to-unit jitter.
        min_samples: observations of a stage before its factor is applied (>= 1).
        bounds: ``(low, high)`` clip of observations and factors (0 < low <= 1 <= high).
        deadband: relative change of the estimate that republishes a factor (>= 0).
    """

    alpha: float = 0.15
    min_samples: int = 5
    bounds: tuple[float, float] = (0.25, 4.0)
    deadband: float = 0.02

    def __post_init__(self) -> None:
        if not 0.0 < self.alpha <= 1.0:
            raise ValueError(f"alpha must be in (0, 1], got {self.alpha!r}")
        if self.min_samples < 1:
            raise ValueError(f"min_samples must be >= 1, got {self.min_samples!r}")
        low, high = self.bounds
        if not (0.0 < low <= 1.0 <= high and math.isfinite(high)):
            raise ValueError(f"bounds must satisfy 0 < low <= 1 <= high < inf, got "
                             f"{self.bounds!r}")
        if not self.deadband >= 0.0:
            raise ValueError(f"deadband must be >= 0, got {self.deadband!r}")


class RateCorrection:
    """Per-stage multiplicative slowdown factors learned from completed units.

    Not thread-safe: it is fed and read by the one thread that drives a policy.

    Args:
        settings: EWMA, warm-up, clipping and dead-band parameters.

    Example::

        corr = RateCorrection()
        for _ in range(10):
            corr.observe(Stage.ACTION, 1.5)   # units take 1.5x their predicted time
        corr.factors                          # (1.0, 1.0, 1.5)
    """

    __slots__ = ("_log_dev", "_log_est", "_log_pub", "samples", "settings")

    def __init__(self, settings: CorrectionSettings | None = None) -> None:
        self.settings = settings if settings is not None else CorrectionSettings()
        #: Observations accepted per stage.
        self.samples: list[int] = [0] * NUM_STAGES
        self._log_est: list[float] = [0.0] * NUM_STAGES
        self._log_pub: list[float] = [0.0] * NUM_STAGES
        self._log_dev: list[float] = [0.0] * NUM_STAGES

    @property
    def factors(self) -> tuple[float, float, float]:
        """Published factors ``(k_V, k_P, k_A)``: 1.0 until a stage has warmed up."""
        p = self._log_pub
        return (math.exp(p[0]), math.exp(p[1]), math.exp(p[2]))

    @property
    def estimates(self) -> tuple[float, float, float]:
        """Current estimates, published or not (diagnostics)."""
        e = self._log_est
        return (math.exp(e[0]), math.exp(e[1]), math.exp(e[2]))

    @property
    def dispersion(self) -> tuple[float, float, float]:
        """Typical relative error of one observation about the estimate, per stage.

        ``exp(d_s) − 1`` where ``d_s`` is the weighted mean absolute deviation of the
        observations' logs from the estimate before each (0 until a stage has two).
        """
        d = self._log_dev
        return (math.expm1(d[0]), math.expm1(d[1]), math.expm1(d[2]))

    def observe(self, stage: int, ratio: float) -> bool:
        """Record one completed unit's observed-to-predicted work ratio ``ŵ / W_s``.

        Args:
            stage: the unit's stage index (0 ViT, 1 Prefill, 2 Action).
            ratio: work integrated at the calibrated rates over the unit's life,
                divided by the stage's calibrated work. Non-finite or non-positive
                values (e.g. a unit aborted at its launch instant) are ignored.

        Returns:
            True when the published factors changed (consumers must re-apply them).
        """
        if not (ratio > 0.0 and math.isfinite(ratio)):
            return False
        low, high = self.settings.bounds
        x = math.log(min(max(ratio, low), high))
        n = self.samples[stage] + 1
        self.samples[stage] = n
        min_n = self.settings.min_samples
        # Equal weights while warming up (running mean), then the EWMA.
        w = 1.0 / n if n <= min_n else self.settings.alpha
        prev = self._log_est[stage]
        if n > 1:  # the first observation has no estimate to deviate from
            wd = 1.0 / (n - 1) if n <= min_n + 1 else self.settings.alpha
            self._log_dev[stage] += wd * (abs(x - prev) - self._log_dev[stage])
        est = prev + w * (x - prev)
        self._log_est[stage] = est
        if n < min_n:
            return False
        # Publish on warm-up completion, then only beyond the dead-band.
        if n > min_n and abs(est - self._log_pub[stage]) <= math.log1p(self.settings.deadband):
            return False
        if est == self._log_pub[stage]:
            return False
        self._log_pub[stage] = est
        return True

    def reset(self) -> None:
        """Forget every observation; factors return to 1."""
        self.samples = [0] * NUM_STAGES
        self._log_est = [0.0] * NUM_STAGES
        self._log_pub = [0.0] * NUM_STAGES
        self._log_dev = [0.0] * NUM_STAGES

    def summary(self) -> CorrectionSummary:
        """JSON-ready state: published factors, current estimates, sample counts."""
        return {"factors": list(self.factors), "estimates": list(self.estimates),
                "dispersion": list(self.dispersion), "samples": list(self.samples),
                "alpha": self.settings.alpha,
                "min_samples": self.settings.min_samples,
                "bounds": list(self.settings.bounds), "deadband": self.settings.deadband}
