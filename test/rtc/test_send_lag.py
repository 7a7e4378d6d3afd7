import math

import numpy as np
import pytest

from xinfer_ros.rtc.send_lag import DEFAULT_WINDOW, SendLagStats


def test_empty_stats_are_zero() -> None:
    stats = SendLagStats()
    assert stats.count == 0
    assert stats.mean_ms == 0.0 and stats.p95_ms == 0.0 and stats.max_ms == 0.0


def test_mean_max_and_p95_in_milliseconds() -> None:
    stats = SendLagStats()
    lags = [0.001 * k for k in range(1, 21)]  # 1..20 ms
    for lag in lags:
        stats.record(lag)
    assert stats.count == 20
    assert stats.mean_ms == pytest.approx(10.5)
    assert stats.max_ms == pytest.approx(20.0)
    assert stats.p95_ms == pytest.approx(np.percentile(np.arange(1, 21), 95))
    assert stats.mean_ms <= stats.p95_ms <= stats.max_ms


def test_tiny_negative_lag_is_clamped_to_zero() -> None:
    stats = SendLagStats()
    assert stats.record(-1e-9) == 0.0
    stats.record(0.004)
    assert stats.count == 2
    assert stats.mean_ms == pytest.approx(2.0) and stats.max_ms == pytest.approx(4.0)


def test_p95_uses_recent_window_but_mean_and_max_are_cumulative() -> None:
    stats = SendLagStats(window=4)
    stats.record(1.0)  # 1000 ms, then pushed out of the window
    for _ in range(4):
        stats.record(0.002)
    assert stats.count == 5
    assert stats.p95_ms == pytest.approx(2.0)
    assert stats.max_ms == pytest.approx(1000.0)
    assert stats.mean_ms == pytest.approx((1000.0 + 4 * 2.0) / 5)


def test_default_window_is_bounded() -> None:
    stats = SendLagStats()
    for k in range(DEFAULT_WINDOW + 50):
        stats.record(0.1 if k < 50 else 0.0)
    assert stats.count == DEFAULT_WINDOW + 50
    assert stats.p95_ms == 0.0 and stats.max_ms == pytest.approx(100.0)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_lag_is_rejected(bad: float) -> None:
    stats = SendLagStats()
    with pytest.raises(ValueError, match="finite"):
        stats.record(bad)
    assert stats.count == 0


def test_window_must_be_positive() -> None:
    with pytest.raises(ValueError, match="window"):
        SendLagStats(window=0)
