"""Batched stage units across robots (issue 16, item 3): queue, engine, parity."""

from __future__ import annotations

import math
import time
from collections import Counter
from typing import Any

import numpy as np
import pytest

from xinfer_ros.core.batching import batch_sizes, lanes_for
from xinfer_ros.core.stages import Stage
from xinfer_ros.engine import EngineConfig, StageEngine, Status, make_backend
from xinfer_ros.engine.batching import BatchQueue, BatchSizes


def test_batch_sizes_count_batches_from_keep_from_on() -> None:
    sizes = BatchSizes()
    assert math.isnan(BatchSizes.mean_size(sizes.snapshot()["action"]))
    sizes.keep_from, sizes.keep_until = 10.0, 20.0
    sizes.record(Stage.ACTION, 4, 9.9)  # warm-up: not counted
    sizes.record(Stage.ACTION, 4, 10.0)
    sizes.record(Stage.ACTION, 1, 12.0)
    sizes.record(Stage.ACTION, 1, 13.0)
    sizes.record(Stage.VIT, 2, 11.0)
    sizes.record(Stage.VIT, 2, 20.0)  # the drain after the window: not counted
    snap = sizes.snapshot()
    assert snap == {"vit": {"2": 1}, "prefill": {}, "action": {"1": 2, "4": 1}}
    assert BatchSizes.mean_size(snap["action"]) == pytest.approx(2.0)


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


def test_a_spreading_queue_gives_each_lane_its_share_of_the_waiting_units() -> None:
    q = BatchQueue(4, lambda _stage, _live: "k", lanes=(1, 1, 2))
    for i in range(2):  # queued spreading: each leads a batch of its share
        q.put(Stage.ACTION, i, 0.0, spread=True)
    assert [len(q.take(Stage.ACTION)) for _ in range(3)] == [1, 1, 0]
    for i in range(7):
        q.put(Stage.ACTION, i, 0.0, spread=True)
    assert [len(q.take(Stage.ACTION)) for _ in range(4)] == [4, 2, 1, 0]  # ceil(n / 2)
    for i in range(3):
        q.put(Stage.VIT, i, 0.0, spread=True)
    assert len(q.take(Stage.VIT)) == 3  # one ViT lane: its share is all of them
    for i in range(2):
        q.put(Stage.ACTION, i, 0.0)
    q.put(Stage.ACTION, 2, 0.0, spread=True)  # a later decision's spreading unit
    assert len(q.take(Stage.ACTION)) == 3  # the oldest launched batching: they batch
    with pytest.raises(ValueError, match="lanes"):
        BatchQueue(4, lambda _stage, _live: "k", lanes=(1, 0, 2))


def test_tight_units_go_first_in_launch_order_with_tight_mates_within_every_limit() -> None:
    q = BatchQueue(4, lambda _stage, live: live[0], lanes=(1, 1, 2))
    for live in ("a1", "a2"):
        q.put(Stage.ACTION, live, 0.0)
    q.put(Stage.ACTION, "a-tight-alone", 0.1, limit=1)
    q.put(Stage.ACTION, "a3", 0.2)
    q.put(Stage.ACTION, "a-tight-3", 0.3, limit=3)
    q.put(Stage.ACTION, "b-tight-3", 0.3, limit=3)  # another key: not a mate
    q.put(Stage.ACTION, "a-tight-2", 0.4, limit=2)
    q.put(Stage.ACTION, "a-tight-4", 0.5, limit=4)
    # Ahead of every ordinary unit, in launch order; a tight unit's limit bounds its
    # forward (alone at 1), and its mates are tight units of its key only.
    assert [w.live for w in q.take(Stage.ACTION)] == ["a-tight-alone"]
    assert [w.live for w in q.take(Stage.ACTION)] == ["a-tight-3", "a-tight-2"]
    assert [w.live for w in q.take(Stage.ACTION)] == ["b-tight-3"]
    assert [w.live for w in q.take(Stage.ACTION)] == ["a-tight-4"]
    assert [w.live for w in q.take(Stage.ACTION)] == ["a1", "a2", "a3"]
    q.put(Stage.ACTION, "d", 0.4, spread=True)
    q.put(Stage.ACTION, "e", 0.5, limit=1, spread=True)
    assert [[w.live for w in q.take(Stage.ACTION)] for _ in range(3)] == [["e"], ["d"], []]


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


class _Batches:
    """Records the batch sizes a backend runs; fails one robot's unit of one stage."""

    def __init__(self, backend: Any) -> None:
        self.sizes: list[tuple[Stage, int]] = []
        self.fail: tuple[Stage, str] | None = None
        self._run = backend.run_batch

    def __call__(self, stage: Stage, states: Any, lane: Any) -> None:
        self.sizes.append((stage, len(states)))
        if self.fail is not None and stage is self.fail[0] and any(
                s.prepared.request_id.startswith(f"{self.fail[1]}/") for s in states):
            raise RuntimeError("injected fault")
        self._run(stage, states, lane)


def _serve(backend: Any, config: EngineConfig, previous: list[Any] | None = None,
           counted: list[BatchSizes] | None = None) -> list[Any]:
    """Four requests prepared before the dispatcher starts: its first decision sees all.

    ``counted`` receives the engine's batch counter.
    """
    engine = StageEngine(backend, "fifo", config)
    if counted is not None:
        counted.append(engine.batches)
    try:
        futures = [engine.submit(backend.example_inputs(i, None if previous is None
                                                        else previous[i]), 5.0, f"r{i}")
                   for i in range(4)]
        deadline = time.monotonic() + 30.0
        while engine._events.pending < 4 and time.monotonic() < deadline:
            time.sleep(0.01)  # until the four preparations have reported
        engine.start()
        return [f.result(60) for f in futures]
    finally:
        engine.close()


@torch_only
def test_batched_engine_matches_one_at_a_time(pi0_backend: Any,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    alone = _serve(pi0_backend, EngineConfig(slots=(4, 4, 4)))
    alone_rtc = _serve(pi0_backend, EngineConfig(slots=(4, 4, 4)), [r.actions for r in alone])
    spy = _Batches(pi0_backend)
    monkeypatch.setattr(pi0_backend, "run_batch", spy)
    counted: list[BatchSizes] = []
    batched = _serve(pi0_backend, EngineConfig(slots=(4, 4, 4), max_batch=4),
                     counted=counted)
    # One decision launched the four ViT units; one lane task took them as one batch.
    assert spy.sizes[0] == (Stage.VIT, 4), spy.sizes
    assert all(n <= 4 for _, n in spy.sizes)
    # The engine's own count of what ran, as the benchmark reports it, is the spy's.
    assert counted[0].snapshot() == {
        stage.name.lower(): {str(k): n for k, n in sorted(
            Counter(size for st, size in spy.sizes if st == stage).items())}
        for stage in Stage}
    batched_rtc = _serve(pi0_backend, EngineConfig(slots=(4, 4, 4), max_batch=4),
                         [r.actions for r in batched])
    for one, many in zip(alone + alone_rtc, batched + batched_rtc, strict=True):
        assert one.ok and many.ok, (one.reason, many.reason)
        np.testing.assert_allclose(many.actions, one.actions, atol=1e-4, rtol=1e-4)


@torch_only
def test_a_faulty_request_fails_alone_and_its_batch_mates_are_served(
        pi0_backend: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    spy = _Batches(pi0_backend)
    spy.fail = (Stage.PREFILL, "r2")
    monkeypatch.setattr(pi0_backend, "run_batch", spy)
    results = _serve(pi0_backend, EngineConfig(slots=(4, 4, 4), max_batch=4))
    assert (Stage.PREFILL, 4) in spy.sizes  # the batch raised; its units were rerun alone
    assert results[2].status is Status.ERROR and "injected fault" in results[2].reason
    assert all(r.ok for i, r in enumerate(results) if i != 2), [r.reason for r in results]


def _prefilled(backend: Any, robots: range) -> list[Any]:
    """Distinct requests (own images, state and noise; RTC for odd robots) after Prefill."""
    states = []
    for i in robots:
        state = backend.prepare(backend.example_inputs(
            i, np.full(backend.action_shape, 0.1 * i) if i % 2 else None), i, f"r{i}")
        backend.run_stage(Stage.VIT, state, None)
        backend.run_stage(Stage.PREFILL, state, None)
        states.append(state)
    return states


@torch_only
def test_action_worker_runs_a_batch_as_the_lanes_do(pi0_backend: Any) -> None:
    workers = make_backend("torch", model="pi0-tiny", device="cpu", threads=1,
                           action_processes=1)
    try:
        in_worker, in_lane = _prefilled(workers, range(3)), _prefilled(pi0_backend, range(3))
        workers.run_batch(Stage.ACTION, in_worker, None)
        pi0_backend.run_batch(Stage.ACTION, in_lane, None)
        chunks = [pi0_backend.finish(s) for s in in_lane]
        assert not np.allclose(chunks[0], chunks[1])  # rows differ: a mix-up would show
        for state, chunk in zip(in_worker, chunks, strict=True):
            np.testing.assert_allclose(workers.finish(state), chunk, atol=1e-5)
    finally:
        workers.close()


@torch_only
def test_reference_models_run_units_one_at_a_time() -> None:
    pytest.importorskip("torch")
    tiny = make_backend("torch", model="tiny", device="cpu", threads=1)
    assert not tiny.can_batch
    with pytest.raises(ValueError, match="tiny runs units one at a time"):
        StageEngine(tiny, "fifo", EngineConfig(max_batch=4))


def test_cuda_graphs_need_a_single_action_lane() -> None:
    from xinfer_ros.engine import EmulatedBackend

    class Graphs(EmulatedBackend):
        compile_mode = "cudagraphs"  # replays would share the captured buffers

    with pytest.raises(ValueError, match="needs one Action lane, got 6"):
        StageEngine(Graphs(), "fifo", EngineConfig(slots=(4, 4, 6)))
    StageEngine(Graphs(), "fifo", EngineConfig(slots=(4, 4, 1))).close()
