"""The speed probe times its work unit beside a run, in its own process."""

from __future__ import annotations

import time

import pytest

from xinfer_ros.engine.speed_probe import SpeedProbe, probe_work


def test_the_work_unit_is_fixed() -> None:
    assert probe_work(10) == sum(i * i % 7 for i in range(10))


def test_the_probe_samples_inside_the_window_only() -> None:
    with SpeedProbe(period_s=0.02) as probe:
        t0 = time.monotonic()
        time.sleep(1.5)  # the spawned child imports before its first sample
        t1 = time.monotonic()
    whole = probe.summary(t0, t1)
    assert whole is not None and whole.samples >= 5
    for name in ("matmul", "python"):
        st = getattr(whole, name)
        assert 0 < st.p10_ms <= st.median_ms <= st.p90_ms == whole.to_dict()[name]["p90_ms"]
        assert whole.median_ms(name) == st.median_ms
    assert probe.summary(t1 + 60, t1 + 120) is None
    probe.stop()  # idempotent
    assert whole.to_dict()["samples"] == whole.samples


def test_a_probe_without_a_period_is_refused() -> None:
    with pytest.raises(ValueError, match="period_s"):
        SpeedProbe(period_s=0)
