"""The speed probe times its work unit beside a run, in its own process."""

from __future__ import annotations

import os
import time

import pytest

from xinfer_ros.engine.speed_probe import (
    ProbeStats,
    SpeedProbe,
    SpeedProbeError,
    SpeedSummary,
    probe_work,
)


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
        assert whole.stats(name) == st
    assert probe.summary(t1 + 60, t1 + 120) is None
    probe.stop()  # idempotent
    assert whole.to_dict()["samples"] == whole.samples


def test_a_probe_without_a_period_is_refused() -> None:
    with pytest.raises(SpeedProbeError, match="period_s"):
        SpeedProbe(period_s=0)


def test_a_dead_child_leaves_no_samples_and_no_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENBLAS_NUM_THREADS", raising=False)
    probe = SpeedProbe(period_s=0.02)
    probe.start()
    # The child's BLAS was set to one thread; this process's environment is as it was.
    assert "OPENBLAS_NUM_THREADS" not in os.environ
    probe._proc.kill()
    probe._proc.join(5)
    assert probe.summary(0.0, time.monotonic() + 1) is None
    never = SpeedProbe()
    never.stop()  # never started: nothing to collect
    assert never.summary(0.0, 1e12) is None


def test_deciles_stay_inside_few_samples() -> None:
    st = ProbeStats.of([1.0, 5.0])
    assert 1.0 <= st.p10_ms <= st.median_ms <= st.p90_ms <= 5.0
    with pytest.raises(SpeedProbeError, match="no work unit"):
        SpeedSummary(matmul=st, python=st, samples=2).stats("torch")
