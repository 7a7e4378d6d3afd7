"""App. A.1 projection: Table 3 interpolation, Eq. 6 fit, Figure 2 anchor points."""

from __future__ import annotations

import pytest

from xinfer_ros.sim.projection import (
    extrapolation_fit,
    handled_rate,
    project_curve,
    project_point,
)


def test_fit_reproduces_paper_constants() -> None:
    t200, k = extrapolation_fit()
    assert t200 == pytest.approx(2.6163, abs=1e-4)
    assert k == pytest.approx(0.0071353, rel=1e-4)


def test_interpolation_and_continuity_at_200ms() -> None:
    assert handled_rate(0) == 1968 and handled_rate(-10) == 1968
    assert handled_rate(75) == pytest.approx((2020 + 1892) / 2)
    assert handled_rate(200.0001) == pytest.approx(1376, rel=1e-5)


def test_figure2_flashrt_anchor() -> None:
    # Paper: FlashRT P50 505.4 ms at 16 robots -> 13.0k parcels/h.
    p = project_point(16, 505.4)
    assert p.extrapolated
    assert p.parcels_per_hour == pytest.approx(13_000, rel=0.01)
    assert p.band_low < p.parcels_per_hour < p.band_high


def test_curve_is_dense_and_uses_zero_delay_below_baseline() -> None:
    pts = project_curve([1, 4], [30.0, 120.0])
    assert [p.robots for p in pts] == [1, 2, 3, 4]
    assert pts[0].parcels_per_hour == 1968
    with pytest.raises(ValueError):
        project_curve([], [])
