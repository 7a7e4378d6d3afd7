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


def _running(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie no init reaps here counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_a_probe_whose_parent_is_killed_leaves_too() -> None:
    """A benchmark killed by a signal never stops its probe; the probe notices it was
    re-parented and exits within a period instead of probing for good."""
    import signal
    import subprocess
    import sys

    code = ("import time; from xinfer_ros.engine.speed_probe import SpeedProbe\n"
            "if __name__ == '__main__':\n"
            "    p = SpeedProbe(0.05); p.start(); print(p._proc.pid, flush=True)\n"
            "    time.sleep(60)\n")
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        time.sleep(0.5)
        assert _running(child)
        parent.send_signal(signal.SIGKILL)
        parent.wait(5)
        deadline = time.monotonic() + 5.0
        while _running(child) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _running(child)
    finally:
        parent.kill()
