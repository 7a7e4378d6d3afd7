"""Physical-throughput projection of Appendix A.1 (Eq. 5-7, Table 3, Figure 2).

Maps a serving curve (response P50 vs. robot count) to projected fleet parcels per
hour with the paper's single-robot calibration: handled parcels/h under added response
delay (Table 3), interpolated piecewise linearly up to 200 ms added delay (250 ms
response latency) and extrapolated beyond with a per-parcel-time line (Eq. 6) whose
slope is the least-squares fit of ``3600/q`` at 100, 150 and 200 ms.

The projection inherits the paper's scope limits: P50 is treated as a constant delay,
robots are identical and independent, and jitter and shared physical bottlenecks are
ignored. It is a what-if, not a measured fleet output.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = [
    "BASELINE_LATENCY_MS",
    "TABLE3",
    "Calibration",
    "ProjectionPoint",
    "extrapolation_fit",
    "handled_rate",
    "project_curve",
    "project_point",
]

#: Baseline single-robot response latency removed before the delay lookup (ms).
BASELINE_LATENCY_MS: float = 50.0


@dataclass(frozen=True, slots=True)
class Calibration:
    """Handled parcel rates (parcels/h) and their trial SDs under added delay (ms)."""

    delay_ms: tuple[float, ...]
    handled: tuple[float, ...]
    handled_sd: tuple[float, ...]


#: Table 3 of the paper (handled rates and SDs; completed rates are not used).
TABLE3 = Calibration(
    delay_ms=(0.0, 25.0, 50.0, 100.0, 150.0, 200.0),
    handled=(1968.0, 1944.0, 2020.0, 1892.0, 1552.0, 1376.0),
    handled_sd=(86.5, 43.3, 73.3, 66.1, 96.2, 129.4),
)

_FIT_DELAYS = (100.0, 150.0, 200.0)


def extrapolation_fit(cal: Calibration = TABLE3) -> tuple[float, float]:
    """Anchor ``t200`` (s/parcel) and slope ``k`` (s/ms) of Eq. 6.

    The slope is the least-squares slope of ``3600/q(Δ)`` at Δ = 100, 150, 200 ms,
    which reproduces the paper's k = 0.0071353 s/ms.
    """
    qs = {d: q for d, q in zip(cal.delay_ms, cal.handled, strict=True)}
    x = np.array(_FIT_DELAYS)
    y = np.array([3600.0 / qs[d] for d in _FIT_DELAYS])
    slope = float(np.sum((x - x.mean()) * (y - y.mean())) / np.sum((x - x.mean()) ** 2))
    return 3600.0 / qs[200.0], slope


def handled_rate(delay_ms: float, cal: Calibration = TABLE3) -> float:
    """Handled parcels/h for one robot at ``delay_ms`` added delay (Eq. 5-6 inner q)."""
    d = max(0.0, delay_ms)
    if d <= cal.delay_ms[-1]:
        return float(np.interp(d, cal.delay_ms, cal.handled))
    t200, k = extrapolation_fit(cal)
    return 3600.0 / (t200 + k * (d - cal.delay_ms[-1]))


def _extrapolation_halfwidth(delay_ms: float, cal: Calibration) -> float:
    """One robot's first-order half-width of Eq. 7 beyond the calibrated range.

    Perturbs the calibration means at 100 and 200 ms (which move both the anchor and
    the fitted slope) by central differences and combines with their SDs.
    """
    total = 0.0
    for j in (100.0, 200.0):
        idx = cal.delay_ms.index(j)
        eps = 1.0
        hi = list(cal.handled)
        lo = list(cal.handled)
        hi[idx] += eps
        lo[idx] -= eps
        cal_hi = Calibration(cal.delay_ms, tuple(hi), cal.handled_sd)
        cal_lo = Calibration(cal.delay_ms, tuple(lo), cal.handled_sd)
        grad = (handled_rate(delay_ms, cal_hi) - handled_rate(delay_ms, cal_lo)) / (2 * eps)
        total += (grad * cal.handled_sd[idx]) ** 2
    return math.sqrt(total)


@dataclass(frozen=True, slots=True)
class ProjectionPoint:
    """Projected fleet throughput at one robot count.

    Attributes:
        robots: Robot count N.
        p50_ms: Response P50 used (ms).
        delay_ms: Added delay ``max(0, P50 - 50 ms)``.
        parcels_per_hour: ``N q(delay)`` (Eq. 5, or Eq. 6 beyond 200 ms delay).
        band_low: Lower edge of the sensitivity band (parcels/h).
        band_high: Upper edge of the sensitivity band (parcels/h).
        extrapolated: Whether Eq. 6 was used (delay beyond the calibration).
    """

    robots: int
    p50_ms: float
    delay_ms: float
    parcels_per_hour: float
    band_low: float
    band_high: float
    extrapolated: bool


def project_point(
    robots: int,
    p50_ms: float,
    cal: Calibration = TABLE3,
    baseline_ms: float = BASELINE_LATENCY_MS,
) -> ProjectionPoint:
    """Project one (robots, P50) point (Eq. 5-7).

    Raises:
        ValueError: If ``robots`` < 1 or ``p50_ms`` is not finite.
    """
    if robots < 1 or not math.isfinite(p50_ms):
        raise ValueError(f"need robots >= 1 and a finite P50, got {robots!r}, {p50_ms!r}")
    delay = max(0.0, p50_ms - baseline_ms)
    rate = handled_rate(delay, cal)
    extrapolated = delay > cal.delay_ms[-1]
    if extrapolated:
        half = _extrapolation_halfwidth(delay, cal)
    else:
        # Linear interpolation of the variance; below the first calibrated delay the
        # paper uses the 25 ms SD, which for delay >= 0 is where np.interp already is.
        var = float(np.interp(delay, cal.delay_ms, np.square(cal.handled_sd)))
        half = math.sqrt(var)
    return ProjectionPoint(
        robots=robots,
        p50_ms=p50_ms,
        delay_ms=delay,
        parcels_per_hour=robots * rate,
        band_low=robots * (rate - half),
        band_high=robots * (rate + half),
        extrapolated=extrapolated,
    )


def project_curve(
    robots: Sequence[int],
    p50_ms: Sequence[float],
    cal: Calibration = TABLE3,
    dense: bool = True,
) -> list[ProjectionPoint]:
    """Project a latency-vs-robots curve, interpolating P50 at every integer count.

    Args:
        robots: Measured robot counts (ascending).
        p50_ms: Mean response P50 at each count.
        cal: Physical calibration.
        dense: Interpolate P50 piecewise linearly to every integer between the first
            and last measured count, as Figure 2 does.

    Raises:
        ValueError: On mismatched or empty inputs.
    """
    if len(robots) != len(p50_ms) or not robots:
        raise ValueError("robots and p50_ms must be non-empty and of equal length")
    order = np.argsort(robots)
    xs = np.asarray(robots, float)[order]
    ys = np.asarray(p50_ms, float)[order]
    counts = range(int(xs[0]), int(xs[-1]) + 1) if dense else [int(x) for x in xs]
    return [project_point(n, float(np.interp(n, xs, ys)), cal) for n in counts]
