"""Arms compared at one host speed: the common-slope fit recovers what it should."""

from __future__ import annotations

import math

import numpy as np
import pytest

from xinfer_ros.engine.speed_adjust import ArmRun, SpeedAdjustError, fit_common_slope


def _runs(levels: dict[str, float], probes: dict[str, list[float]], slope: float,
          noise: float = 0.0, seed: int = 0) -> list[ArmRun]:
    rng = np.random.default_rng(seed)
    ref = math.log(1.0)
    return [ArmRun(arm, levels[arm] + slope * (math.log(p) - ref) + rng.normal(0, noise), p)
            for arm, ps in probes.items() for p in ps]


def test_an_arm_measured_on_slow_hosts_is_not_judged_worse_for_it() -> None:
    # Both arms are equally good; B happened to run while the host was slow.
    probes = {"A": [0.88, 0.90, 0.92, 0.94], "B": [0.94, 0.96, 0.98, 1.00]}
    fit = fit_common_slope(_runs({"A": 70.0, "B": 70.0}, probes, slope=-200.0))
    assert fit.arm("B").raw_median < fit.arm("A").raw_median - 8  # raw: B looks worse
    diff, _ = fit.difference("B", "A")
    assert diff == pytest.approx(0.0, abs=1e-9)
    assert fit.slope == pytest.approx(-200.0)
    assert fit.residual_sd == pytest.approx(0.0, abs=1e-9)
    assert fit.raw_sd > 4


def test_a_real_difference_survives_the_adjustment_and_noise_shrinks() -> None:
    probes = {"A": [0.88, 0.93, 0.97, 0.90, 0.95, 0.99],
              "B": [0.89, 0.92, 0.98, 0.91, 0.96, 0.94]}
    fit = fit_common_slope(_runs({"A": 70.0, "B": 64.0}, probes, slope=-200.0, noise=1.0))
    diff, se = fit.difference("A", "B")
    assert abs(diff - 6.0) < 3 * se
    assert se < 1.5
    assert fit.residual_sd < fit.raw_sd / 2
    assert fit.dof == 12 - 3
    # The arms are compared at the runs' geometric mean probe time.
    every = [p for ps in probes.values() for p in ps]
    assert fit.probe_ms == pytest.approx(math.exp(np.mean(np.log(every))))
    assert {a.runs for a in fit.arms} == {6}


def test_the_standard_errors_are_the_closed_form_ones() -> None:
    # One slope and two levels: var(a_i - a_j) = s2 (1/n_i + 1/n_j + (xbar_i - xbar_j)^2 / Sxx),
    # Sxx the within-arm sum of squares of x.
    probes = {"A": [0.88, 0.93, 0.97, 0.90], "B": [0.95, 0.92, 0.99, 1.01, 0.96]}
    runs = _runs({"A": 70.0, "B": 64.0}, probes, slope=-150.0, noise=2.0, seed=3)
    fit = fit_common_slope(runs)
    x = {a: np.log(ps) for a, ps in probes.items()}
    y = {a: np.array([r.value for r in runs if r.arm == a]) for a in probes}
    sxx = sum(float(((v - v.mean()) ** 2).sum()) for v in x.values())
    sxy = sum(float(((x[a] - x[a].mean()) * (y[a] - y[a].mean())).sum()) for a in probes)
    slope = sxy / sxx
    rss = sum(float(((y[a] - y[a].mean() - slope * (x[a] - x[a].mean())) ** 2).sum())
              for a in probes)
    s2 = rss / (9 - 3)
    gap = float(x["A"].mean() - x["B"].mean())
    diff, se = fit.difference("A", "B")
    assert fit.slope == pytest.approx(slope)
    assert fit.slope_se == pytest.approx(math.sqrt(s2 / sxx))
    assert fit.residual_sd == pytest.approx(math.sqrt(s2))
    assert diff == pytest.approx(float(y["A"].mean() - y["B"].mean()) - slope * gap)
    assert se == pytest.approx(math.sqrt(s2 * (1 / 4 + 1 / 5 + gap ** 2 / sxx)))
    assert fit.arm("A").probe_ms == pytest.approx(math.exp(x["A"].mean()))


def test_the_fit_refuses_runs_it_cannot_fit() -> None:
    with pytest.raises(SpeedAdjustError, match="need at least 4"):
        fit_common_slope([ArmRun("A", 1.0, 1.0), ArmRun("B", 2.0, 1.1),
                          ArmRun("A", 1.5, 1.2)])
    with pytest.raises(SpeedAdjustError, match="same probe time"):
        fit_common_slope([ArmRun("A", v, 1.0) for v in (1.0, 2.0, 3.0)])
    with pytest.raises(SpeedAdjustError, match="cannot be told apart"):
        fit_common_slope([ArmRun("A", 1.0, 1.0), ArmRun("A", 2.0, 1.0),
                          ArmRun("B", 1.5, 1.1), ArmRun("B", 2.5, 1.1)])
    with pytest.raises(SpeedAdjustError, match="finite"):
        fit_common_slope([ArmRun("A", v, p) for v, p in ((math.nan, 1.0), (2.0, 1.1),
                                                         (3.0, 1.2))])
    with pytest.raises(SpeedAdjustError, match="positive"):
        fit_common_slope([ArmRun("A", v, p) for v, p in ((1.0, 0.0), (2.0, 1.0), (3.0, 2.0))])
    fit = fit_common_slope([ArmRun("A", v, p) for v, p in ((1.0, 1.0), (2.0, 1.1), (3.0, 1.3))])
    with pytest.raises(SpeedAdjustError, match="no runs of arm 'B'"):
        fit.arm("B")
