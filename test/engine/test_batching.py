"""Batched stage units across robots (issue 16, item 3): queue, engine, parity."""

from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np
import pytest

from xinfer_ros.core.batching import batch_sizes, lanes_for
from xinfer_ros.core.stages import Stage
from xinfer_ros.engine import EngineConfig, StageEngine, Status, make_backend
from xinfer_ros.engine.batching import BatchQueue


def test_lanes_and_even_batches() -> None:
    assert [lanes_for(n, 4) for n in (1, 4, 5, 8)] == [1, 1, 2, 2]
    assert batch_sizes(5, 4) == [3, 2] and batch_sizes(8, 4) == [4, 4]
    assert batch_sizes(3, 1) == [1, 1, 1] and batch_sizes(0, 4) == []
    assert EngineConfig(slots=(4, 4, 6), max_batch=4).lanes(2) == 2
    assert EngineConfig(slots=(4, 4, 6)).lanes(2) == 6
    with pytest.raises(ValueError, match="max_batch"):
        EngineConfig(max_batch=0)


def test_queue_takes_the_oldest_unit_with_mates_of_its_key() -> None:
    q = BatchQueue(3, lambda _stage, live: live[0])
    for live in [("a", 1), ("b", 2), ("a", 3), ("a", 4), ("a", 5)]:
        q.put(Stage.ACTION, live, 0.0)
    q.put(Stage.VIT, ("a", 6), 0.0)
    assert [w.live for w in q.take(Stage.ACTION)] == [("a", 1), ("a", 3), ("a", 4)]
    assert [w.live for w in q.take(Stage.ACTION)] == [("b", 2)]  # kept its place
    assert [w.live for w in q.take(Stage.ACTION)] == [("a", 5)]
    assert q.take(Stage.ACTION) == [] and len(q) == 1


def test_units_without_a_key_run_alone() -> None:
    q = BatchQueue(4, lambda _stage, _live: None)
    for i in range(3):
        q.put(Stage.VIT, i, float(i))
    assert [(w.live, w.issued) for w in q.take(Stage.VIT)] == [(0, 0.0)]


def test_backends_that_cannot_batch_refuse_max_batch() -> None:
    emulated = make_backend("emulated")
    with pytest.raises(ValueError, match="one at a time"):
        StageEngine(emulated, "fifo", EngineConfig(max_batch=2))


torch_only = pytest.mark.torch


@pytest.fixture(scope="module")
def pi0_backend() -> Any:
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    return make_backend("torch", model="pi0-tiny", device="cpu", threads=1)


class _HeldBatches:
    """Records batch sizes; holds the first unit until released, so others queue."""

    def __init__(self, backend: Any) -> None:
        self.sizes: list[tuple[Stage, int]] = []
        self.release = threading.Event()
        self.fail: Stage | None = None
        self._run = backend.run_batch

    def __call__(self, stage: Stage, states: Any, lane: Any) -> None:
        self.sizes.append((stage, len(states)))
        self.release.wait(10.0)
        if stage is self.fail:
            raise RuntimeError("injected batch fault")
        self._run(stage, states, lane)


def _serve(backend: Any, config: EngineConfig, spy: _HeldBatches | None,
           previous: list[Any] | None = None) -> list[Any]:
    with StageEngine(backend, "fifo", config) as engine:
        futures = [engine.submit(backend.example_inputs(i, None if previous is None
                                                        else previous[i]), 5.0, f"r{i}")
                   for i in range(4)]
        if spy is not None:
            time.sleep(0.3)  # every request prepared and launched behind the held unit
            spy.release.set()
        return [f.result(60) for f in futures]


@torch_only
def test_batched_engine_matches_one_at_a_time(pi0_backend: Any,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    alone = _serve(pi0_backend, EngineConfig(slots=(4, 4, 4)), None)
    alone_rtc = _serve(pi0_backend, EngineConfig(slots=(4, 4, 4)), None,
                       [r.actions for r in alone])
    spy = _HeldBatches(pi0_backend)
    monkeypatch.setattr(pi0_backend, "run_batch", spy)
    batched = _serve(pi0_backend, EngineConfig(slots=(4, 4, 4), max_batch=4), spy)
    assert max(n for _, n in spy.sizes) >= 3, spy.sizes  # the held unit's followers
    assert all(n <= 4 for _, n in spy.sizes)
    spy.sizes.clear()
    spy.release.clear()
    batched_rtc = _serve(pi0_backend, EngineConfig(slots=(4, 4, 4), max_batch=4), spy,
                         [r.actions for r in batched])
    assert max(n for s, n in spy.sizes if s is Stage.ACTION) >= 2, spy.sizes
    for one, many in zip(alone + alone_rtc, batched + batched_rtc, strict=True):
        assert one.ok and many.ok, (one.reason, many.reason)
        np.testing.assert_allclose(many.actions, one.actions, atol=1e-4, rtol=1e-4)


@torch_only
def test_a_failing_batch_fails_its_requests_and_the_engine_serves_on(
        pi0_backend: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    spy = _HeldBatches(pi0_backend)
    spy.fail = Stage.PREFILL
    monkeypatch.setattr(pi0_backend, "run_batch", spy)
    config = EngineConfig(slots=(4, 4, 4), max_batch=4)
    results = _serve(pi0_backend, config, spy)
    assert all(r.status is Status.ERROR and "injected batch fault" in r.reason
               for r in results)
    spy.fail = None
    with StageEngine(pi0_backend, "fifo", config) as engine:
        after = engine.submit(pi0_backend.example_inputs(0, None), 5.0, "r0").result(60)
    assert after.ok, after.reason


@torch_only
def test_action_worker_runs_a_batch_as_the_lanes_do(pi0_backend: Any) -> None:
    workers = make_backend("torch", model="pi0-tiny", device="cpu", threads=1,
                           action_processes=1)
    try:
        fresh = workers.state_factory()
        in_worker = [fresh(Stage.ACTION) for _ in range(3)]
        workers.run_batch(Stage.ACTION, in_worker, None)
        in_lane = [fresh(Stage.ACTION) for _ in range(3)]
        pi0_backend.run_batch(Stage.ACTION, in_lane, None)
        for a, b in zip(in_worker, in_lane, strict=True):
            np.testing.assert_allclose(a.actions.numpy(), b.actions.numpy(), atol=1e-5)
    finally:
        workers.close()


@torch_only
def test_reference_models_run_units_one_at_a_time() -> None:
    pytest.importorskip("torch")
    tiny = make_backend("torch", model="tiny", device="cpu", threads=1)
    assert not tiny.can_batch
    with pytest.raises(ValueError, match="tiny runs units one at a time"):
        StageEngine(tiny, "fifo", EngineConfig(max_batch=4))
