"""The torch backend with the tiny preset (CPU)."""

from __future__ import annotations

import dataclasses
import os

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from xinfer_ros.engine import EngineConfig, StageEngine, Status, make_backend
from xinfer_ros.engine.affinity import available_cpus

pytestmark = pytest.mark.torch


@pytest.fixture(scope="module")
def backend():  # type: ignore[no-untyped-def]
    return make_backend("torch", model="tiny", device="cpu", threads=1)


def test_tiny_model_engine_run_returns_actions(backend) -> None:  # type: ignore[no-untyped-def]
    engine = StageEngine(backend, "xinfer", EngineConfig(slots=(2, 2, 2)))
    with engine:
        first = engine.submit(backend.example_inputs(0, None), 2.0, "r0")
        second = engine.submit(backend.example_inputs(1, None), 2.0, "r1")
        r0, r1 = first.result(60), second.result(60)
        rtc = engine.submit(backend.example_inputs(0, r0.actions), 2.0, "r0").result(60)
        full = backend.example_inputs(2, None)
        bad_inputs = dataclasses.replace(full, images=full.images[:1])
        bad = engine.submit(bad_inputs, 2.0, "r2").result(60)
    for r in (r0, r1, rtc):
        assert r.status is Status.OK, r.reason
        assert not r.emulated
        assert r.actions is not None and r.actions.shape == (16, 14)
        assert np.all(np.isfinite(r.actions))
    # RTC: the committed prefix is the previous chunk's aligned keyframes, bit for bit.
    assert rtc.actions is not None and r0.actions is not None
    assert np.array_equal(rtc.actions[:8], r0.actions[8:16])
    assert bad.status is Status.REJECTED and "images" in bad.reason


def test_fast_path_chains_a_lone_request_with_the_same_chunk(backend) -> None:  # type: ignore[no-untyped-def]
    # On the CPU a lone request runs from preparation to output on the fast lane; its
    # chunks (fresh and RTC-guided) are those of the dispatcher's path, bit for bit.
    assert backend.chains_stages
    runs = []
    for fast in (True, False):
        with StageEngine(backend, "xinfer", EngineConfig(slots=(1, 1, 2),
                                                         fast_path=fast)) as engine:
            first = engine.submit(backend.example_inputs(5, None), 5.0, "r").result(60)
            rtc = engine.submit(backend.example_inputs(5, first.actions), 5.0, "r").result(60)
            stats = engine.stats()
        assert first.ok and rtc.ok, (first.reason, rtc.reason)
        runs.append((first.actions, rtc.actions, stats["fast_path_units"]))
    (a0, b0, fast_units), (a1, b1, slow_units) = runs
    assert np.array_equal(a0, a1) and np.array_equal(b0, b1)
    assert (fast_units, slow_units) == (6, 0)


def test_action_worker_process_matches_in_thread_action(backend) -> None:  # type: ignore[no-untyped-def]
    cpu = min(available_cpus())
    proc_backend = make_backend("torch", model="tiny", device="cpu", threads=1,
                                action_processes=1, action_cpus=(cpu,),
                                inline_idle_action=False)
    try:
        (pid,) = proc_backend.action_worker_pids
        assert os.sched_getaffinity(pid) == {cpu}
        assert proc_backend.describe()["action_cpus"] == [cpu]
        results = []
        for be in (backend, proc_backend):
            with StageEngine(be, "fifo", EngineConfig(slots=(1, 1, 1))) as engine:
                first = engine.submit(be.example_inputs(3, None), 5.0, "r").result(60)
                rtc = engine.submit(be.example_inputs(3, first.actions), 5.0, "r").result(60)
            assert first.ok and rtc.ok, (first.reason, rtc.reason)
            results.append((first.actions, rtc.actions))
        (a0, b0), (a1, b1) = results
        assert np.array_equal(a0, a1) and np.array_equal(b0, b1)
    finally:
        proc_backend.close()


def test_lone_action_unit_skips_the_worker_with_the_same_chunk(backend) -> None:  # type: ignore[no-untyped-def]
    # A worker buys parallelism only beside another unit: a lone request's Action runs
    # in the parent (no hand-over to another process) and yields the very same chunk.
    proc_backend = make_backend("torch", model="tiny", device="cpu", threads=1,
                                action_processes=1)
    try:
        chunks = []
        for be in (backend, proc_backend):
            with StageEngine(be, "fifo", EngineConfig(slots=(1, 1, 1))) as engine:
                r = engine.submit(be.example_inputs(4, None), 5.0, "r").result(60)
            assert r.ok, r.reason
            chunks.append(r.actions)
        assert np.array_equal(chunks[0], chunks[1])
        assert proc_backend.inline_action_units == 1
        assert proc_backend.describe()["inline_idle_action"] is True
    finally:
        proc_backend.close()


def test_action_cpus_need_worker_processes() -> None:
    with pytest.raises(ValueError, match="action_processes"):
        make_backend("torch", model="tiny", device="cpu", action_cpus=(0,))
