"""The engine's fast path: an idle engine's lone request skips the dispatcher's hand-offs.

A lone request runs from preparation to output on the fast lane; whatever arrives
mid-chain hands it back to the dispatcher at its next stage boundary. Results, policy
calls and bookkeeping must be those of the ordinary path.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import numpy as np
import pytest

from xinfer_ros.core.policy import Policy
from xinfer_ros.core.registry import make_policy
from xinfer_ros.core.stages import Stage
from xinfer_ros.engine import EngineConfig, EngineResult, StageEngine, Status
from xinfer_ros.engine.backends.emulated import placeholder_actions
from xinfer_ros.engine.lanes import LaneInfo
from xinfer_ros.model.inputs import RequestInputs

from .helpers import MonitoredBackend, make_engine

TIMEOUT = 20.0
#: Work factor of a request whose units last long enough to act during them.
SLOW = 120.0


class ThreadedBackend(MonitoredBackend):
    """Records which thread ran each unit: ``(robot, stage, thread name)``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.threads: list[tuple[str, Stage, str]] = []

    def run_stage(self, stage: Stage, state: Any, lane: LaneInfo | None) -> None:
        super().run_stage(stage, state, lane)
        with self._mon:
            self.threads.append((state.robot_id, stage, threading.current_thread().name))

    def lanes_of(self, robot: str) -> list[str]:
        """The lane group of each unit of ``robot``, in order."""
        with self._mon:
            return [name.split("-")[1] for r, _, name in self.threads if r == robot]


class PolicyGuard:
    """Wraps policies' methods: records the calls and whether two threads overlapped."""

    _CALLS = ("add_request", "complete", "remove_request", "abort", "schedule", "ready_queue")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._owner: int | None = None
        self._depth = 0
        self.overlaps = 0
        self.calls: list[tuple[Any, ...]] = []

    def wrap(self, policy: Policy) -> Policy:
        for name in self._CALLS:
            setattr(policy, name, self._guarded(name, getattr(policy, name)))
        return policy

    def _guarded(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def guarded(*args: Any, **kwargs: Any) -> Any:
            me = threading.get_ident()
            with self._lock:
                if self._depth and self._owner != me:
                    self.overlaps += 1
                self._owner, self._depth = me, self._depth + 1
            try:
                out = fn(*args, **kwargs)
            finally:
                with self._lock:
                    self._depth -= 1
            if name in ("add_request", "complete", "remove_request", "abort"):
                rid = args[0].request_id if name == "add_request" else args[0]
                self.calls.append((name, rid, *(Stage(a) for a in args[1:2]
                                               if name == "complete")))
            elif name == "schedule":
                for launch in out.launches:
                    self.calls.append(("launch", launch.request_id, launch.stage))
            return out
        return guarded


def _guarded_engine(fast: bool, policy: str = "xinfer", **kwargs: Any
                    ) -> tuple[StageEngine, ThreadedBackend, PolicyGuard]:
    guard = PolicyGuard()
    cfg = EngineConfig(slots=(2, 2, 3), fast_path=fast, **kwargs)
    engine, backend = make_engine(guard.wrap(make_policy(policy, slots=cfg.slots)), cfg,
                                  backend_cls=ThreadedBackend)
    assert isinstance(backend, ThreadedBackend)
    return engine, backend, guard


def _wait_running(backend: MonitoredBackend, stage: Stage) -> None:
    """Block until a unit of ``stage`` runs on the emulated device."""
    for _ in range(20_000):
        if backend.now_running[stage]:
            return
        threading.Event().wait(0.0005)
    raise AssertionError(f"no {stage.name} unit started")


def test_lone_request_runs_back_to_back_on_the_fast_lane() -> None:
    engine, backend, guard = _guarded_engine(True)
    with engine:
        result = engine.submit(RequestInputs(seed=7), 0.5, "r0").result(TIMEOUT)
        stats = engine.stats()
    assert result.ok, result.reason
    assert np.array_equal(result.actions, placeholder_actions(backend.action_shape, 7))
    # Preparation, three units and output: five steps, none on the dispatcher.
    assert stats["fast_path_units"] == 3 and stats["fast_path_steps"] == 5
    assert backend.lanes_of("r0") == ["fast"] * 3
    t = result.timings
    for name in ("prepare_ms", "vit_ms", "prefill_ms", "action_ms", "output_ms", "total_ms"):
        assert getattr(t, name) >= 0, name
    assert t.queue_ms >= 0
    assert t.total_ms >= t.vit_ms + t.prefill_ms + t.action_ms
    assert stats["running"] == [0, 0, 0] and stats["live"] == 0
    assert stats["results"]["OK"] == 1 == sum(stats["results"].values())
    assert guard.overlaps == 0


@pytest.mark.parametrize("policy", ["xinfer", "fifo"])
def test_fast_path_keeps_the_ordinary_paths_results_and_bookkeeping(policy: str) -> None:
    runs = []
    for fast in (True, False):
        engine, _, guard = _guarded_engine(fast, policy, phase_spread=True)
        ends: list[tuple[int, Stage]] = []
        observe_end = engine.audit.observe_end

        def spy(rid: int, stage: Stage, t: float, observe: Any = observe_end,
                ends: list[tuple[int, Stage]] = ends) -> None:
            ends.append((rid, stage))
            observe(rid, stage, t)

        engine.audit.observe_end = spy  # type: ignore[method-assign]
        released: list[str] = []
        release_at = engine.releases.release_at

        def planned(robot: str, *args: float, plan: Any = release_at,
                    released: list[str] = released) -> float:
            released.append(robot)
            return float(plan(robot, *args))

        engine.releases.release_at = planned  # type: ignore[method-assign]
        with engine:
            results = [engine.submit(RequestInputs(seed=i), 0.5, "r0", age=0.1 * (i % 3))
                       .result(TIMEOUT) for i in range(6)]
            stats = engine.stats()
        assert engine.rate_correction is not None
        runs.append((results, guard.calls, ends, stats, released,
                     list(engine.rate_correction.samples)))
    fast_res, fast_calls, fast_ends, fast_stats, fast_held, fast_rc = runs[0]
    slow_res, slow_calls, slow_ends, slow_stats, slow_held, slow_rc = runs[1]
    assert fast_stats["fast_path_units"] == 18 and slow_stats["fast_path_units"] == 0
    assert slow_stats["fast_path_steps"] == 0
    for a, b in zip(fast_res, slow_res, strict=True):
        assert a.status is b.status is Status.OK
        assert np.array_equal(a.actions, b.actions)
        assert a.deadline - a.arrival == pytest.approx(b.deadline - b.arrival, abs=1e-9)
        assert (a.release_at > a.finished) == (b.release_at > b.finished)
    # The same policy calls (arrivals, launches, completions) and audit resolutions, in
    # the same order; every unit fed the rate correction.
    assert fast_calls == slow_calls
    assert fast_rc == slow_rc == [6, 6, 6]
    assert fast_ends == slow_ends == [(r, s) for r in range(1, 7) for s in Stage]
    assert fast_held == slow_held == ["r0"] * 6  # the release planner saw every chunk
    assert fast_stats["results"] == slow_stats["results"]


def test_request_arriving_mid_chain_is_served_and_the_first_keeps_its_result() -> None:
    engine, backend, guard = _guarded_engine(True, "fifo")
    with engine:
        first = engine.submit(RequestInputs(seed=1, work_factor=SLOW), 10.0, "r0")
        _wait_running(backend, Stage.VIT)
        # Its ViT ends after r0's: r1 is still live at r0's next stage boundary.
        second = engine.submit(RequestInputs(seed=2, work_factor=SLOW), 10.0, "r1")
        r0, r1 = first.result(TIMEOUT), second.result(TIMEOUT)
        stats = engine.stats()
    assert r0.ok and r1.ok, (r0.reason, r1.reason)
    assert np.array_equal(r0.actions, placeholder_actions(backend.action_shape, 1))
    assert np.array_equal(r1.actions, placeholder_actions(backend.action_shape, 2))
    # r0's ViT ran on the fast lane; at its end r1 was live: the dispatcher took over.
    assert backend.lanes_of("r0") == ["fast", "context", "action"]
    assert backend.lanes_of("r1") == ["context", "context", "action"]
    assert stats["fast_path_units"] == 1
    assert stats["running"] == [0, 0, 0] and stats["live"] == 0
    assert guard.overlaps == 0


def test_cancel_mid_chain_sheds_at_the_next_boundary() -> None:
    engine, backend, _ = _guarded_engine(True, "fifo")
    with engine:
        fut = engine.submit(RequestInputs(seed=1, work_factor=SLOW), 10.0, "r0")
        _wait_running(backend, Stage.VIT)
        engine.cancel("r0", "robot left")
        cancelled = fut.result(TIMEOUT)
        after = engine.submit(RequestInputs(seed=3), 10.0, "r0").result(TIMEOUT)
        stats = engine.stats()
    assert cancelled.status is Status.SHED and "cancelled: robot left" in cancelled.reason
    assert cancelled.actions is None
    # The cancelled request ran nothing past its ViT; the next one chains again.
    assert [s for r, s, _ in backend.threads if r == "r0"] == [Stage.VIT, *Stage]
    assert after.ok and backend.lanes_of("r0") == ["fast"] * 4
    assert stats["fast_path_units"] == 4 and stats["running"] == [0, 0, 0]


def test_policy_switch_mid_chain_hands_back_and_the_old_policy_finishes() -> None:
    engine, backend, _ = _guarded_engine(True, "fifo")
    with engine:
        fut = engine.submit(RequestInputs(seed=1, work_factor=SLOW), 10.0, "r0")
        _wait_running(backend, Stage.VIT)
        assert engine.set_policy("edf").result(TIMEOUT) == "edf"
        first = fut.result(TIMEOUT)
        # Drained: the next decision drops the old policy, and lone requests chain again.
        engine.submit(RequestInputs(seed=2), 10.0, "r0").result(TIMEOUT)
        again = engine.submit(RequestInputs(seed=3), 10.0, "r0").result(TIMEOUT)
        stats = engine.stats()
    assert first.ok and again.ok
    assert backend.lanes_of("r0")[:3] == ["fast", "context", "action"]
    assert backend.lanes_of("r0")[-3:] == ["fast"] * 3
    assert stats["draining_policies"] == 0 and stats["policy"] == "edf"


def test_switches_change_mid_chain_keeps_the_request() -> None:
    engine, backend, _ = _guarded_engine(True, "fifo")
    with engine:
        fut = engine.submit(RequestInputs(seed=1, work_factor=SLOW), 10.0, "r0")
        _wait_running(backend, Stage.VIT)
        cfg = engine.set_switches(intra_stage=False, cross_stage=False).result(TIMEOUT)
        result = fut.result(TIMEOUT)
        backend.peak_total = 0
        other = [engine.submit(RequestInputs(seed=i), 10.0, f"r{i}") for i in range(1, 4)]
        results = [f.result(TIMEOUT) for f in other]
    assert cfg.serial_device and cfg.fast_path
    # The switches were applied before r0's next decision: it ran on, under them.
    assert result.ok and all(r.ok for r in results)
    assert backend.peak_total == 1  # serial from then on


def test_a_policy_that_waits_on_the_clock_is_ticked_after_a_fast_step() -> None:
    """A step off the dispatcher that launches nothing must still wake its ticks."""
    from xinfer_ros.core.baselines import FIFOPolicy

    class HoldsPrefill(FIFOPolicy):
        """FIFO that starts a Prefill only 0.1 s (engine) after the ViT ended."""

        time_dependent = True

        def _dispatch(self, t: float) -> list[Any]:
            held = {rid: r for rid, r in self._ready[Stage.PREFILL].items()
                    if t < r.finished[Stage.VIT] + 0.1}
            for rid in held:
                del self._ready[Stage.PREFILL][rid]
            try:
                return super()._dispatch(t)
            finally:
                self._ready[Stage.PREFILL].update(held)

    cfg = EngineConfig(slots=(2, 2, 2))
    engine, backend = make_engine(HoldsPrefill(slots=cfg.slots), cfg,
                                  backend_cls=ThreadedBackend)
    assert isinstance(backend, ThreadedBackend)
    with engine:
        result = engine.submit(RequestInputs(seed=4), 2.0, "r0").result(TIMEOUT)
        stats = engine.stats()
    assert result.ok, result.reason
    assert result.timings.queue_ms >= 100.0  # Prefill waited for the policy's clock
    # The ViT chained; the dispatcher's tick launched the held Prefill on its lane.
    assert backend.lanes_of("r0") == ["fast", "context", "action"]
    assert stats["fast_path_units"] == 1


def test_without_chaining_steps_are_still_taken_off_the_dispatcher() -> None:
    class OwnLanes(ThreadedBackend):
        chains_stages = False  # e.g. CUDA lanes: each unit stays on its own lane

    engine, backend = make_engine("fifo", EngineConfig(slots=(2, 2, 2)), backend_cls=OwnLanes)
    assert isinstance(backend, ThreadedBackend)
    with engine:
        result = engine.submit(RequestInputs(seed=4), 0.5, "r0").result(TIMEOUT)
        stats = engine.stats()
    assert result.ok
    assert stats["fast_path_units"] == 0 and stats["fast_path_steps"] == 5
    assert backend.lanes_of("r0") == ["context", "context", "action"]


def test_fast_path_off_leaves_every_step_to_the_dispatcher() -> None:
    engine, backend, _ = _guarded_engine(False, "fifo")
    with engine:
        result = engine.submit(RequestInputs(seed=4), 0.5, "r0").result(TIMEOUT)
        stats = engine.stats()
    assert result.ok
    assert stats["fast_path_units"] == 0 and stats["fast_path_steps"] == 0
    assert stats["decisions"] >= 5
    assert backend.lanes_of("r0") == ["context", "context", "action"]


def test_fast_lane_that_cannot_start_leaves_requests_to_the_other_lanes() -> None:
    class BrokenFastLane(ThreadedBackend):
        def lane_setup(self, lane: LaneInfo) -> None:
            if lane.group == "fast":
                raise ValueError("no stream for this lane")

    engine, backend = make_engine("fifo", EngineConfig(slots=(2, 2, 2)),
                                  backend_cls=BrokenFastLane)
    with engine:
        results = [engine.submit(RequestInputs(seed=i), 0.5, "r0").result(TIMEOUT)
                   for i in range(2)]
        stats = engine.stats()
    assert all(r.ok for r in results), [r.reason for r in results]
    assert stats["fast_path_units"] == 0
    assert isinstance(backend, ThreadedBackend)
    assert backend.lanes_of("r0") == ["context", "context", "action"] * 2


def test_close_during_a_chain_finishes_the_request() -> None:
    engine, backend, _ = _guarded_engine(True, "fifo")
    engine.start()
    fut = engine.submit(RequestInputs(seed=1, work_factor=SLOW), 10.0, "r0")
    _wait_running(backend, Stage.VIT)
    engine.close(drain_timeout=10.0)
    result = fut.result(TIMEOUT)
    assert result.ok and not engine.running


@pytest.mark.parametrize("seed", range(3))
def test_random_submits_and_cancels_never_hang(seed: int) -> None:
    """Bursts and lulls of submits, cancels and switches from several threads."""
    rng = random.Random(seed)
    engine, backend, guard = _guarded_engine(True, rng.choice(["xinfer", "fifo", "edf"]),
                                             max_live=6)
    futures: list[Future[EngineResult]] = []
    lock = threading.Lock()

    def client(k: int) -> None:
        local = random.Random(seed * 100 + k)
        for _ in range(25):
            action = local.random()
            robot = f"r{local.randrange(4)}"
            if action < 0.65:
                fut = engine.submit(RequestInputs(seed=local.randrange(1000),
                                                  work_factor=local.choice([0.5, 1.0, 8.0])),
                                    local.choice([0.05, 0.3, 2.0]), robot)
                with lock:
                    futures.append(fut)
            elif action < 0.85:
                engine.cancel(robot, "test")
            elif action < 0.92:
                engine.set_policy(guard.wrap(make_policy(local.choice(["fifo", "edf"]),
                                                         slots=engine.config.slots)))
            else:
                engine.set_switches(intra_stage=local.random() < 0.5)
            # Lulls let the engine go idle (the fast path), bursts overlap chains.
            threading.Event().wait(local.choice([0.0, 0.0, 0.002, 0.03]))

    with engine:
        threads = [threading.Thread(target=client, args=(k,)) for k in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(TIMEOUT)
        results = [f.result(TIMEOUT) for f in futures]
        lone = engine.submit(RequestInputs(seed=5), 2.0, "last").result(TIMEOUT)
        stats = engine.stats()
    assert len(results) == len(futures) > 0
    assert lone.ok
    assert not [r.reason for r in results if r.status is Status.ERROR]
    assert all(r.actions is not None for r in results if r.ok)
    assert stats["live"] == 0 and stats["running"] == [0, 0, 0]
    assert all(p <= s for p, s in zip(backend.peak, (2, 2, 3), strict=True)), backend.peak
    assert stats["fast_path_units"] >= 3  # the lone request at the end chained at least
    assert guard.overlaps == 0


def _one_after_another(engine: StageEngine) -> tuple[EngineResult, EngineResult, Any]:
    """Two requests of one robot on a started ``engine``, the second after the first."""
    with engine:
        first = engine.submit(RequestInputs(seed=1), 5.0, "r0").result(TIMEOUT)
        after = engine.submit(RequestInputs(seed=2), 5.0, "r0").result(TIMEOUT)
        return first, after, engine.stats()


def test_a_bug_in_the_chain_hands_its_launched_unit_to_the_ordinary_lanes() -> None:
    engine, backend, guard = _guarded_engine(True, "fifo")
    real = engine._run_started
    broken = {"left": 1}

    def run_started(started: Any) -> Any:
        if broken["left"]:
            broken["left"] -= 1
            raise RuntimeError("injected")
        return real(started)

    engine._run_started = run_started  # type: ignore[method-assign]
    first, after, stats = _one_after_another(engine)
    # Served by the ordinary lanes, not left to its 5 s deadline.
    assert first.ok and after.ok, (first.reason, after.reason)
    assert first.timings.total_ms < 2_000.0
    assert isinstance(backend, ThreadedBackend)
    assert backend.lanes_of("r0")[0] == "context"  # the unit the chain had launched
    assert stats["live"] == 0 and stats["running"] == [0, 0, 0]
    assert guard.overlaps == 0


def test_an_output_that_breaks_outside_the_backend_fails_its_request_once(
        caplog: pytest.LogCaptureFixture) -> None:
    """A break around the backend's output (here the gate) fails that request with the
    error, logged once with its traceback; its output is not handed to another lane to
    run again, and the next request is served."""
    engine, backend, _ = _guarded_engine(True)
    exclusive = engine._gate.exclusive
    calls = {"n": 0}

    def breaks_on_the_first_output() -> Any:
        calls["n"] += 1
        if calls["n"] == 2:  # the first request's preparation, then its output
            raise RuntimeError("gate broke")
        return exclusive()

    engine._gate.exclusive = breaks_on_the_first_output  # type: ignore[method-assign]
    finished: list[int] = []
    finish = backend.finish

    def counted(state: Any) -> Any:
        finished.append(state.request_id)
        return finish(state)

    backend.finish = counted  # type: ignore[method-assign]
    first, after, stats = _one_after_another(engine)
    assert first.status is Status.ERROR and "gate broke" in first.reason, first.reason
    assert after.ok, after.reason
    assert finished == [after.request_id]
    broke = [r for r in caplog.records if "broke outside the backend" in r.getMessage()]
    assert len(broke) == 1 and broke[0].exc_info is not None, caplog.text
    assert stats["live"] == 0 and stats["running"] == [0, 0, 0]
