"""Compare benchmark arms at one host speed: a common-slope fit on the speed probe.

Runs of several arms at one robot count are fitted as ``y = a_arm + b * (x - x_mean)``,
with ``y`` a figure of the run (attainment in per cent, goodput) and ``x`` the log of
the run's speed-probe median (:mod:`xinfer_ros.engine.speed_probe`). ``a_arm`` is the
arm's figure at the runs' mean speed; one slope ``b`` for every arm, because the arms
are measured at the same load and a separate slope per arm would need many more runs.
The residual spread against the raw spread says how much of the run-to-run noise the
host's speed explained.

The interval is estimate +- :data:`INTERVAL_SE` standard errors: about 95 %, narrower
than Student's t would give (2.07 standard errors at 23 degrees of freedom, 2.36 at 7,
3.18 at 3), so a verdict on few runs is less sure than it reads.

A run far from the others' speed weighs on the slope: in our 27-run blocks, dropping
the one slowest run moved the slope by half. Each arm's mean probe time is reported so
that a reader sees whether the arms ran at comparable speeds.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from xinfer_ros.errors import XInferRosError

__all__ = [
    "INTERVAL_SE",
    "AdjustedArm",
    "ArmRun",
    "SpeedAdjustError",
    "SpeedFit",
    "fit_common_slope",
    "interval_verdict",
    "student_t975",
]

#: Half-width of the interval a verdict reads, in standard errors.
INTERVAL_SE = 2.0


class SpeedAdjustError(XInferRosError, ValueError):
    """The runs cannot be fitted (too few, one speed, or an arm without runs)."""


#: Student's t, 97.5 % quantile (a two-sided 95 % interval), by degrees of freedom 1-30.
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
         2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
         2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


def student_t975(dof: int) -> float:
    """Student's t 97.5 % quantile at ``dof`` (>= 1) degrees of freedom.

    Past 30 it returns the value at 30 (2.042), a little wide of the limit (1.960).
    """
    if dof < 1:
        raise SpeedAdjustError(f"degrees of freedom must be >= 1, got {dof}")
    return _T975[min(dof, len(_T975)) - 1]


def interval_verdict(diff: float, se: float, tolerance: float,
                     width: float = INTERVAL_SE) -> str:
    """Whether ``diff`` ± ``width`` · ``se`` keeps above ``-tolerance``.

    Returns:
        ``holds`` when the whole interval lies at or above ``-tolerance``, ``fails``
        when it lies wholly below, else ``undecided (within)`` or ``undecided
        (short)`` by the side the estimate is on.
    """
    lo, hi = diff - width * se, diff + width * se
    if lo >= -tolerance:
        return "holds"
    if hi < -tolerance:
        return "fails"
    return f"undecided ({'within' if diff >= -tolerance else 'short'})"


@dataclass(frozen=True)
class ArmRun:
    """One run of one arm."""

    arm: str
    # The figure compared (attainment in per cent, goodput in requests/s, ...).
    value: float
    # The speed probe's median work-unit time in this run (ms; larger = slower host).
    probe_ms: float


@dataclass(frozen=True)
class AdjustedArm:
    """One arm's figure at the runs' mean speed."""

    arm: str
    runs: int
    raw_median: float
    adjusted: float
    # Standard error of ``adjusted``.
    se: float
    # Geometric mean of this arm's probe times (ms): the arms' balance in speed.
    probe_ms: float


@dataclass(frozen=True)
class SpeedFit:
    """The common-slope fit of one robot count's runs."""

    arms: tuple[AdjustedArm, ...]
    # Change of the figure per unit of log(probe ms): negative when slower hosts lose.
    slope: float
    slope_se: float
    # Spread of the figure around each arm's mean, raw and after the speed term.
    raw_sd: float
    residual_sd: float
    # Degrees of freedom of the residual.
    dof: int
    # The probe's geometric mean over the runs (ms): the speed the arms are compared at.
    probe_ms: float
    # Covariance of the arm levels, in the order of ``arms``.
    level_cov: np.ndarray = field(repr=False, compare=False)

    def arm(self, name: str) -> AdjustedArm:
        """The adjusted figure of arm ``name``."""
        return self.arms[self._index(name)]

    def _index(self, name: str) -> int:
        for k, a in enumerate(self.arms):
            if a.arm == name:
                return k
        raise SpeedAdjustError(f"no runs of arm {name!r}")

    def difference(self, arm: str, other: str) -> tuple[float, float]:
        """``arm - other`` at the common speed, and its standard error.

        Raises:
            SpeedAdjustError: either arm has no runs.
        """
        i, j = self._index(arm), self._index(other)
        c = np.zeros(len(self.level_cov))
        c[i], c[j] = 1.0, -1.0
        return (self.arms[i].adjusted - self.arms[j].adjusted,
                math.sqrt(max(float(c @ self.level_cov @ c), 0.0)))


def fit_common_slope(runs: Sequence[ArmRun]) -> SpeedFit:
    """Fit one slope on log(probe) and one level per arm (least squares).

    Args:
        runs: the runs of one robot count, each with its arm, figure and probe time.

    Returns:
        The fit: each arm's level at the runs' mean speed, the slope, the spreads.

    Raises:
        SpeedAdjustError: fewer runs than parameters + 1, a non-finite figure, a probe
            time that is not positive, or no run that differs in speed from the other
            runs of its arm (then speed and arm cannot be told apart).
    """
    names = sorted({r.arm for r in runs})
    n, p = len(runs), len(names) + 1
    if n < p + 1:
        raise SpeedAdjustError(f"{n} runs cannot fit {len(names)} arm levels and a slope "
                               f"with a residual: need at least {p + 1}")
    if not all(math.isfinite(r.value) for r in runs):
        raise SpeedAdjustError("a run's figure is not a finite number")
    if not all(r.probe_ms > 0 and math.isfinite(r.probe_ms) for r in runs):
        raise SpeedAdjustError("a run has no positive speed-probe time")
    x = np.log([r.probe_ms for r in runs])
    x_mean = float(x.mean())
    y = np.array([r.value for r in runs], dtype=float)
    arm_of = np.array([names.index(r.arm) for r in runs])
    members = [arm_of == k for k in range(len(names))]
    design = np.zeros((n, p))
    design[np.arange(n), arm_of] = 1.0
    design[:, -1] = x - x_mean
    if np.linalg.matrix_rank(design) < p:  # also when every run has one probe time
        raise SpeedAdjustError("within each arm every run has the same probe time: speed "
                               "and arm cannot be told apart")
    coef, *_ = np.linalg.lstsq(design, y, rcond=None)
    resid = y - design @ coef
    dof = n - p
    s2 = float(resid @ resid) / dof
    cov = s2 * np.linalg.pinv(design.T @ design)
    group_mean = np.array([y[m].mean() for m in members])[arm_of]
    raw_sd = math.sqrt(float(((y - group_mean) ** 2).sum()) / (n - len(names)))
    arms = tuple(
        AdjustedArm(arm=name, runs=int(m.sum()), raw_median=float(np.median(y[m])),
                    adjusted=float(coef[k]), se=math.sqrt(float(cov[k, k])),
                    probe_ms=math.exp(float(x[m].mean())))
        for k, (name, m) in enumerate(zip(names, members, strict=True)))
    return SpeedFit(arms=arms, slope=float(coef[-1]), slope_se=math.sqrt(float(cov[-1, -1])),
                    raw_sd=raw_sd, residual_sd=math.sqrt(s2), dof=dof,
                    probe_ms=math.exp(x_mean), level_cov=cov[:-1, :-1])
