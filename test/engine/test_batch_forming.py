"""The engine runs the batches a batch-forming policy plans (issue 28), on an emulated device.

The ``xinfer_batch`` policy decides on the dispatcher which launched units a free lane runs
together and how long a relaxed lead waits for mates; the lanes run exactly that. Real
time (clock scale 1): the holds are milliseconds long.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Hashable, Sequence
from typing import Any

import pytest

from xinfer_ros.config_paths import config_dir
from xinfer_ros.core.batch_formation import BatchPlan
from xinfer_ros.core.policy import SchedulerOutput
from xinfer_ros.core.rate_table import load_rate_table
from xinfer_ros.core.saturation import SaturationSettings
from xinfer_ros.core.stages import Stage
from xinfer_ros.core.xinfer_policy import XInferPolicy
from xinfer_ros.engine import Clock, EngineConfig, EngineResult, StageEngine
from xinfer_ros.engine.batching import FormedBatches
from xinfer_ros.engine.lanes import LaneInfo
from xinfer_ros.model.inputs import RequestInputs

from .helpers import MonitoredBackend

BATCH4 = load_rate_table(config_dir() / "rate_table_cpu_pi0_tiny_batch4.json")
CONFIG = EngineConfig(slots=(4, 4, 8), max_batch=4, rate_correction=False)
#: Dispatch and thread hand-off on this shared 2-core machine (engine seconds).
SLACK_S = 0.012


class BatchingEmulated(MonitoredBackend):
    """Emulated device that accepts batches and records each one the lanes run.

    ``alone`` robots get ViT and Prefill keys of their own (so they cannot join another
    robot's batch there), as a robot with other cameras and prompt would; a ``slow`` robot's unit of
    the given stage takes the given seconds longer than the table says (the predictor
    does not know).
    """

    can_batch = True

    def __init__(self, *args: Any, alone: Sequence[str] = (),
                 slow: dict[str, tuple[Stage, float]] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.alone = set(alone)
        self.slow = slow or {}
        #: (stage, request ids, engine time the lane started the batch)
        self.batches: list[tuple[Stage, tuple[int, ...], float]] = []

    def batch_key(self, stage: Stage, state: Any) -> Hashable | None:
        if stage is not Stage.ACTION and state.robot_id in self.alone:
            return (stage, state.robot_id)
        return "pi0"

    def run_batch(self, stage: Stage, states: Sequence[Any], lane: LaneInfo | None) -> None:
        with self._mon:
            self.batches.append((stage, tuple(s.request_id for s in states), self.clock.now()))
        super().run_batch(stage, states, lane)
        for state in states:
            if self.slow.get(state.robot_id, (None, 0.0))[0] is stage:
                self.clock.sleep(self.slow[state.robot_id][1])


class PlanSpy:
    """Wraps ``plan_batch``: records each plan and checks it with the policy's predictor.

    The check: no member that the predictor says makes its deadline alone is planned
    into a batch that, by the same predictor, makes it late.
    """

    def __init__(self, policy: XInferPolicy) -> None:
        self.policy = policy
        self.plan = policy.plan_batch
        self.plans: list[tuple[Stage, float, tuple[int, ...], BatchPlan]] = []
        self.violations: list[str] = []
        self.deadlines: dict[int, float] = {}

    def __call__(self, stage: Stage | int, ids: Sequence[int], t: float) -> BatchPlan:
        p, s = self.policy, int(stage)
        counts = p.tracker.counts
        others = tuple(counts[i] - len(ids) * (i == s) for i in range(3))
        cost = p.batch_cost
        assert cost is not None
        durations = cost.durations(s, others)  # type: ignore[arg-type]
        rest = p.predictor.suffix_tab[p.predictor.index(others)][s + 1]  # type: ignore[arg-type]
        plan = self.plan(stage, ids, t)
        for rid in plan.members:
            deadline = p.requests[rid].deadline
            self.deadlines[rid] = deadline
            alone = t + durations[0] + rest
            batched = t + durations[len(plan.members) - 1] + rest
            if alone <= deadline < batched - 1e-9:
                self.violations.append(f"{Stage(s).name} {plan.members}: {rid} late")
        self.plans.append((Stage(s), t, tuple(ids), plan))
        return plan


def _engine(policy: str = "xinfer_batch", config: EngineConfig = CONFIG,
            **backend_kwargs: Any) -> tuple[StageEngine, BatchingEmulated, PlanSpy]:
    clock = Clock(1.0)
    backend = BatchingEmulated(BATCH4, clock, **backend_kwargs)
    engine = StageEngine(backend, policy, config, rate_table=BATCH4, clock=clock)
    assert isinstance(engine.policy, XInferPolicy)
    spy = PlanSpy(engine.policy)
    engine.policy.plan_batch = spy  # type: ignore[method-assign]
    return engine, backend, spy


def _wait_prepared(engine: StageEngine, n: int) -> None:
    """Until ``n`` preparations reported: the first decision then sees them all."""
    until = time.monotonic() + 10.0
    while engine._events.pending < n and time.monotonic() < until:
        time.sleep(0.002)


def _serve(engine: StageEngine, budgets: Sequence[float]) -> list[EngineResult]:
    """Request ``r<i>`` per budget (s), all prepared before the engine's first decision."""
    futures = [engine.submit(RequestInputs(seed=i), b, f"r{i}") for i, b in enumerate(budgets)]
    _wait_prepared(engine, len(budgets))
    engine.start()
    try:
        results = [f.result(10) for f in futures]
    finally:
        engine.close()
    assert all(r.ok for r in results), [r.reason for r in results]
    return results


def _starts(backend: BatchingEmulated, rid: int) -> dict[Stage, tuple[tuple[int, ...], float]]:
    return {stage: (ids, t0) for stage, ids, t0 in backend.batches if rid in ids}


def _launched(spy: PlanSpy, stage: Stage, rid: int) -> float:
    """Launch time of ``rid``'s unit of ``stage`` (its first plan as a candidate)."""
    return min(t for s, t, ids, _ in spy.plans if s is stage and rid in ids)


def test_a_tight_request_is_batched_only_within_its_slack_and_never_held() -> None:
    engine, backend, spy = _engine()
    # Three relaxed requests and one whose slack alone (about 25 ms) a full Action
    # batch (24 ms more than one unit on this table) would nearly use up.
    budgets = [2.0, 2.0, 2.0, BATCH4.isolated_request_s + CONFIG.delta + 0.025]
    results = _serve(engine, budgets)
    assert not spy.violations, spy.violations
    # The lanes ran exactly the planned batches, none of more than max_batch.
    planned = {(s, frozenset(p.members)) for s, _, _, p in spy.plans}
    assert all((s, frozenset(ids)) in planned for s, ids, _ in backend.batches), backend.batches
    assert max(len(ids) for _, ids, _ in backend.batches) <= CONFIG.max_batch
    # The four ran ViT as one batch; at Action the tight one left the fourth out.
    tight = results[3].request_id
    starts = _starts(backend, tight)
    assert len(starts[Stage.VIT][0]) == 4
    assert len(starts[Stage.ACTION][0]) < 4, backend.batches
    for stage, (_, started) in starts.items():
        assert started - _launched(spy, stage, tight) < SLACK_S, (stage, backend.batches)


def test_a_held_lead_starts_by_its_start_by_when_no_mate_comes() -> None:
    # r0 runs ahead (its Prefill 30 ms slow, so that r1 is surely launched at Prefill
    # behind it); r1 (batched alone before Action) is predicted to finish Prefill within
    # r0's Action hold, so r0 waits for it as a mate; but r1's Prefill takes 80 ms longer.
    engine, backend, spy = _engine(alone=["r1"], slow={"r0": (Stage.PREFILL, 0.03),
                                                        "r1": (Stage.PREFILL, 0.08)})
    r0, _ = _serve(engine, [2.0, 2.0])
    first = next(p for s, _, ids, p in spy.plans if s is Stage.ACTION and ids == (r0.request_id,))
    launched = _launched(spy, Stage.ACTION, r0.request_id)
    ids, started = _starts(backend, r0.request_id)[Stage.ACTION]
    assert ids == (r0.request_id,)
    assert first.start_by - launched > 0.02  # held for mates: this test's premise
    # Held until its start_by, not until r1's Prefill completion (about 40 ms later).
    assert first.start_by - CONFIG.tick_s - 1e-3 <= started <= first.start_by + SLACK_S, (
        launched, first.start_by, started)


def test_a_held_lead_starts_early_with_a_mate_that_arrives() -> None:
    # r1 reaches Action a few milliseconds after r0 (its Prefill waits for r0's slow
    # one on the Prefill lane): r0 waits for it, not for start_by.
    engine, backend, spy = _engine(alone=["r1"], slow={"r0": (Stage.PREFILL, 0.03)})
    r0, r1 = _serve(engine, [2.0, 2.0])
    first = next(p for s, _, ids, p in spy.plans if s is Stage.ACTION and ids == (r0.request_id,))
    ids, started = _starts(backend, r0.request_id)[Stage.ACTION]
    assert set(ids) == {r0.request_id, r1.request_id}, backend.batches
    assert started < first.start_by - 0.02
    assert started - _launched(spy, Stage.ACTION, r1.request_id) < SLACK_S


def test_a_lone_request_on_the_fast_path_runs_the_planned_batches() -> None:
    """An idle engine's fast path takes the steps, but the plan still forms every batch."""
    engine, backend, spy = _engine()
    engine.start()
    try:
        results = []
        for i in range(3):  # one at a time: each finds the engine idle
            results.append(engine.submit(RequestInputs(seed=i), 2.0, f"r{i}").result(10))
        stats = engine.stats()
    finally:
        engine.close()
    assert all(r.ok for r in results), [r.reason for r in results]
    assert stats["fast_path_steps"] > 0
    for r in results:  # each stage ran as a batch the plan formed, of this request alone
        planned = {s for s, _, ids, p in spy.plans if r.request_id in p.members}
        assert planned == set(Stage), (r.request_id, spy.plans)
        assert {s: ids for s, (ids, _) in _starts(backend, r.request_id).items()} == \
            {s: (r.request_id,) for s in Stage}
    assert not spy.violations


def test_a_lone_request_of_a_pressure_gated_policy_runs_on_the_fast_lane() -> None:
    """Formed batches keep the fast path: an idle engine runs a lone request's one-unit
    batches back to back on the fast lane, as it does without batching.

    Before (2026-12-05), a formed batch always went to a stage lane, so a batch-forming
    arm never ran a unit on the fast lane and lost its speed at low load.
    ``xinfer_batch_fill_slots`` holds no lead when unpressed, so every unit runs there.
    """
    engine, backend, spy = _engine("xinfer_batch_fill_slots")
    threads: list[str] = []
    run_batch = backend.run_batch

    def recorded(stage: Stage, states: Sequence[Any], lane: LaneInfo | None) -> None:
        threads.append(threading.current_thread().name)
        run_batch(stage, states, lane)

    backend.run_batch = recorded  # type: ignore[method-assign]
    engine.start()
    try:
        results = [engine.submit(RequestInputs(seed=i), 2.0, f"r{i}").result(10)
                   for i in range(3)]  # one at a time: each finds the engine idle
        stats = engine.stats()
    finally:
        engine.close()
    assert all(r.ok for r in results), [r.reason for r in results]
    assert stats["fast_path_units"] == 3 * len(results), stats
    assert len(threads) == 3 * len(results) and all("fast" in t for t in threads), threads
    for r in results:
        assert {s: ids for s, (ids, _) in _starts(backend, r.request_id).items()} == \
            {s: (r.request_id,) for s in Stage}
    assert not spy.violations and engine._formed.free(Stage.ACTION) == 2


@pytest.mark.parametrize("fast_path", [True, False], ids=["fast-lane", "stage-lane"])
def test_a_formed_batch_that_breaks_outside_the_backend_fails_once_and_frees_its_lane(
        fast_path: bool, caplog: pytest.LogCaptureFixture) -> None:
    """A formed batch that breaks in the runner after its forward (a bug outside the
    backend) is never run again, on the fast lane or on a stage lane: its request fails
    with the error (logged once with its traceback), the lane is free, and the next
    request is served. Before, a stage lane lost the units (the request waited for its
    expiry) and the fast lane's chain handed the batch to a lane to run a second time."""
    engine, backend, _ = _engine("xinfer_batch_fill_slots",
                                 dataclasses.replace(CONFIG, fast_path=fast_path))
    runs: list[Stage] = []
    run = engine._units._run

    def breaks(stage, lives, lane, started):  # type: ignore[no-untyped-def]
        runs.append(stage)
        errors = run(stage, lives, lane, started)
        if stage is Stage.PREFILL and runs.count(Stage.PREFILL) == 1:
            raise RuntimeError("runner broke")  # the forward ran, then the runner broke
        return errors

    engine._units._run = breaks  # type: ignore[method-assign]
    engine.start()
    try:
        first = engine.submit(RequestInputs(seed=0), 2.0, "r0").result(10)
        second = engine.submit(RequestInputs(seed=1), 2.0, "r1").result(10)
    finally:
        engine.close()
    assert not first.ok and "runner broke" in first.reason, first.reason
    assert second.ok, second.reason
    assert runs == [Stage.VIT, Stage.PREFILL, Stage.VIT, Stage.PREFILL, Stage.ACTION]
    prefill_runs = [ids for s, ids, _ in backend.batches if s is Stage.PREFILL]
    assert prefill_runs == [(first.request_id,), (second.request_id,)]
    assert all(engine._formed.free(s) == engine._formed.lanes[s] for s in Stage)
    broke = [r for r in caplog.records if "broke outside the backend" in r.getMessage()]
    assert len(broke) == 1 and broke[0].exc_info is not None, caplog.text
    assert engine._fast_units == (5 if fast_path else 0)  # every unit, or none


def test_lanes_batch_as_before_under_other_policies() -> None:
    clock = Clock(1.0)
    backend = BatchingEmulated(BATCH4, clock)
    engine = StageEngine(backend, "xinfer", CONFIG, rate_table=BATCH4, clock=clock)
    assert engine.policy.batch_cost is None  # type: ignore[attr-defined]
    futures = [engine.submit(RequestInputs(seed=i), 2.0, f"r{i}") for i in range(4)]
    _wait_prepared(engine, 4)
    engine.start()
    try:
        assert all(f.result(10).ok for f in futures)
    finally:
        engine.close()
    assert backend.batches[0][0] is Stage.VIT and len(backend.batches[0][1]) == 4
    assert not len(engine._formed)


def test_the_policy_and_the_engine_must_agree_on_max_batch() -> None:
    clock = Clock(1.0)
    policy = XInferPolicy(rate_table=BATCH4, slots=(4, 4, 8), max_batch=4)
    with pytest.raises(ValueError, match="max_batch 2"):
        StageEngine(BatchingEmulated(BATCH4, clock), policy,
                    EngineConfig(slots=(4, 4, 8), max_batch=2), rate_table=BATCH4, clock=clock)
    # By name, the policy takes the engine's max_batch: unbatched, it forms nothing.
    engine = StageEngine(BatchingEmulated(BATCH4, clock), "xinfer_batch",
                         EngineConfig(slots=(4, 4, 8)), rate_table=BATCH4, clock=clock)
    assert engine.policy.batch_cost is None  # type: ignore[attr-defined]


def test_a_plan_that_raises_falls_back_to_launch_order() -> None:
    engine, backend, _ = _engine()
    errors: list[str] = []

    def broken(stage: Stage | int, ids: Sequence[int], t: float) -> BatchPlan:
        errors.append(threading.current_thread().name)
        raise RuntimeError("plan bug")

    engine.policy.plan_batch = broken  # type: ignore[method-assign]
    results = _serve(engine, [2.0, 2.0])
    assert errors and set(errors) == {"xinfer-dispatch"}  # formed on the dispatcher
    both = tuple(r.request_id for r in results)
    assert [(s, ids) for s, ids, _ in backend.batches] == [(s, both) for s in Stage]


class _Live:
    """The fields of a live request that batch formation reads."""

    def __init__(self, rid: int, policy: object) -> None:
        self.rid, self.policy, self.state = rid, policy, None


def test_formation_keeps_the_first_start_by_and_a_lane_for_the_held_lead() -> None:
    owner, errors = object(), []
    formed = FormedBatches((1, 1, 2), 4, lambda _s, _live: "k", errors.append)
    start_by = {0.0: 0.040, 0.010: 0.050}  # a later plan would hold longer

    def plan(stage: Stage, ids: Sequence[int], t: float) -> BatchPlan:
        return BatchPlan(tuple(ids), 0.046, start_by.get(t, t + 0.046))

    formed.put(Stage.ACTION, _Live(1, owner), 0.0)
    assert formed.form(Stage.ACTION, 0.0, owner, plan, 0.002) == []
    assert formed.holding() and formed.free(Stage.ACTION) == 2
    assert formed.form(Stage.ACTION, 0.010, owner, plan, 0.002) == []
    # One tick before the first start_by: the hold would end between two ticks.
    batches = formed.form(Stage.ACTION, 0.0385, owner, plan, 0.002)
    assert [[w.live.rid for w in b] for b in batches] == [[1]]
    assert not formed.holding() and formed.free(Stage.ACTION) == 1
    formed.release(Stage.ACTION)
    assert formed.free(Stage.ACTION) == 2 and not errors


def test_formation_runs_planned_members_only_and_never_past_free_lanes() -> None:
    owner, other = object(), object()
    formed = FormedBatches((1, 1, 1), 4, lambda _s, _live: "k", lambda exc: None)
    for rid in (1, 2, 3):
        formed.put(Stage.PREFILL, _Live(rid, owner), 0.0)
    formed.put(Stage.PREFILL, _Live(5, other), 0.0)  # another policy's unit: not ours

    def plan(stage: Stage, ids: Sequence[int], t: float) -> BatchPlan:
        # A tight last unit leads, with one mate.
        return BatchPlan(tuple(dict.fromkeys((ids[-1], ids[0]))), 0.007, t)

    batches = formed.form(Stage.PREFILL, 0.0, owner, plan, 0.002)
    assert [[w.live.rid for w in b] for b in batches] == [[1, 3]]
    assert formed.form(Stage.PREFILL, 0.0, owner, plan, 0.002) == []  # the one lane is busy
    formed.release(Stage.PREFILL)
    batches = formed.form(Stage.PREFILL, 0.001, owner, plan, 0.002)
    assert [[w.live.rid for w in b] for b in batches] == [[2]] and len(formed) == 1


def test_the_policy_is_told_when_each_formed_batch_starts() -> None:
    """With deferred units, their predictions count the time they ran, not the hold."""
    engine, backend, spy = _engine("xinfer_batch_deferred", alone=["r1"],
                                   slow={"r0": (Stage.PREFILL, 0.03),
                                         "r1": (Stage.PREFILL, 0.08)})
    policy = engine.policy
    assert isinstance(policy, XInferPolicy) and policy.defer_batched_units
    started: list[tuple[Stage, tuple[int, ...], float, float]] = []
    start = policy.start_batch

    def record(stage: Stage | int, ids: Sequence[int], t: float) -> None:
        start(stage, ids, t)
        # Re-anchored: compute from the batch's start plus h_s, no work done before it.
        units = [policy.tracker.units[rid] for rid in ids]
        anchored = all(u.compute_start == t + policy.predictor.h[u.stage] for u in units)
        works = [policy.tracker.work_done(u, t) for u in units]
        started.append((Stage(stage), tuple(ids), t, max(works) if anchored else -1.0))

    policy.start_batch = record  # type: ignore[method-assign]
    r0, _ = _serve(engine, [2.0, 2.0])
    told = {(s, ids): t for s, ids, t, _ in started}
    ran = {(s, ids): t0 for s, ids, t0 in backend.batches}
    assert len(told) == len(started) and len(ran) == len(backend.batches)  # each once
    assert told.keys() == ran.keys()
    assert all(work == 0.0 for *_, work in started)
    # The lane started each batch after the policy was told (lanes run in parallel).
    assert all(told[k] <= ran[k] for k in told)
    # r0's Action was held for a mate: its launch came well before its start.
    action = next(t for s, ids, t, _ in started if s is Stage.ACTION and r0.request_id in ids)
    assert action - _launched(spy, Stage.ACTION, r0.request_id) > 0.02


@pytest.mark.parametrize("policy", ["xinfer_batch_gated", "xinfer_batch"])
def test_gated_units_wait_in_the_ready_queue_while_their_lane_runs_a_batch(policy: str) -> None:
    """The lane gate on the engine: arrivals launch once r0's slow ViT batch frees the lane.

    Without the gate (``xinfer_batch``) they launch at once, up to the stage's four slots,
    and wait for the lane as launched units.
    """
    engine, backend, spy = _engine(policy, slow={"r0": (Stage.VIT, 0.08)})
    launches: dict[int, float] = {}  # request id -> when the policy launched its ViT unit
    schedule = engine.policy.schedule

    def record(t: float) -> SchedulerOutput:
        out = schedule(t)
        launches.update((x.request_id, x.t) for x in out.launches if x.stage is Stage.VIT)
        return out

    engine.policy.schedule = record  # type: ignore[method-assign]
    engine.start()
    try:
        first = engine.submit(RequestInputs(seed=0), 2.0, "r0")
        until = time.monotonic() + 10.0
        while not backend.batches and time.monotonic() < until:
            time.sleep(0.001)
        later = [engine.submit(RequestInputs(seed=i), 2.0, f"r{i}") for i in (1, 2, 3)]
        results = [first.result(10), *(f.result(10) for f in later)]
    finally:
        engine.close()
    assert all(r.ok for r in results), [r.reason for r in results]
    r0, *rest = results
    (ids, started), = [(ids, t0) for s, ids, t0 in backend.batches if s is Stage.VIT
                       and r0.request_id in ids]
    assert ids == (r0.request_id,)
    freed = started + 0.08  # r0's ViT held the one ViT lane at least this long
    launched = [launches[r.request_id] for r in rest]
    if policy == "xinfer_batch_gated":
        assert min(launched) >= freed - 1e-3, (started, launched)
    else:
        assert max(launched) < freed - 0.02, (started, launched)
    assert not spy.violations


def test_the_engine_audits_each_formed_batch_against_its_plan() -> None:
    """A robot whose Action runs 50 ms longer than the table shows in the batch audit."""
    engine, _backend, spy = _engine(slow={"r0": (Stage.ACTION, 0.05)})
    _serve(engine, [2.0, 2.0])
    audit = engine.batch_audit.summary()
    planned = {s.name.lower() for s, _, _, _ in spy.plans}
    assert set(audit) == planned
    action = audit["action"]
    assert sum(cell["batches"] for cell in action.values()) >= 1
    # r0's batch ran 50 ms longer than planned, whichever it was; the others as planned.
    late = sum(c["batches"] * (c["observed_ms"] - c["predicted_ms"]) for c in action.values())
    assert late > 40.0, audit
    for stage in ("vit", "prefill"):
        for cell in audit[stage].values():
            assert cell["ratio_median"] < 2.0, audit
    assert engine._formed.predicted == {}  # each entry left with its batch


def test_batch_feedback_on_the_engine_learns_from_the_batches_it_ran() -> None:
    """Every Action batch runs 60 ms longer than planned: the fed policy's cost rises."""
    engine, _backend, _spy = _engine(
        "xinfer_batch_fill_slots_floors_fed",
        slow={f"r{i}": (Stage.ACTION, 0.06) for i in range(8)})
    policy = engine.policy
    assert isinstance(policy, XInferPolicy) and policy.batch_cost is not None
    # Two waves, so that the feedback has seen its five samples by the second.
    for wave in range(2):
        _serve_more(engine, [2.0] * 4, wave)
    engine.close()
    assert policy.batch_cost.scale[Stage.ACTION] > 1.2, engine.batch_audit.summary()
    assert policy.batch_cost.scale[Stage.VIT] == pytest.approx(1.0, abs=0.5)


def test_feedback_by_size_on_the_engine_learns_each_size_it_ran_from_its_own_batches() -> None:
    """The engine reports each batch's size: sizes that ran learn, sizes that did not keep 1."""
    engine, _backend, _spy = _engine(
        "xinfer_batch_contest", slow={f"r{i}": (Stage.ACTION, 0.06) for i in range(8)})
    policy = engine.policy
    assert isinstance(policy, XInferPolicy) and policy.batch_cost is not None
    for wave in range(3):
        _serve_more(engine, [2.0] * 4, wave)
    engine.close()
    ran = engine.batch_audit.summary()["action"]
    scales = policy.batch_cost.scales
    learned = [k for k in range(1, 5) if str(k) in ran and ran[str(k)]["batches"] >= 5]
    assert learned, ran
    for k in range(1, 5):
        if k in learned:
            assert scales[k - 1][Stage.ACTION] > 1.2, (k, scales, ran)
        elif str(k) not in ran:
            assert scales[k - 1][Stage.ACTION] == 1.0, (k, scales, ran)


def _serve_more(engine: StageEngine, budgets: Sequence[float], wave: int) -> None:
    """Requests ``r<i>`` on a started engine, one wave at a time."""
    engine.start()
    futures = [engine.submit(RequestInputs(seed=10 * wave + i), b, f"r{i}")
               for i, b in enumerate(budgets)]
    results = [f.result(10) for f in futures]
    assert all(r.ok for r in results), [r.reason for r in results]


@pytest.mark.parametrize("policy", ["xinfer", "xinfer_batch"])
def test_results_report_their_action_batch_and_their_wait_on_a_lane(policy: str) -> None:
    # Each robot's ViT has a key of its own: the one ViT lane runs them one at a time,
    # so all but the first wait on it after their launch; their Action units batch.
    clock = Clock(1.0)
    backend = BatchingEmulated(BATCH4, clock, alone=[f"r{i}" for i in range(4)])
    engine = StageEngine(backend, policy, CONFIG, rate_table=BATCH4, clock=clock)
    results = _serve(engine, [2.0] * 4)
    action = {rid: len(ids) for stage, ids, _ in backend.batches if stage is Stage.ACTION
              for rid in ids}
    assert sorted(r.timings.action_batch for r in results) == sorted(action.values())
    assert max(action.values()) > 1
    waits = [r.timings.lane_ms for r in results]
    assert all(w >= 0.0 for w in waits)
    if policy == "xinfer":  # launched together, each ViT waits for the ones before it
        assert max(waits) > 0.5 * BATCH4.work[Stage.VIT] * 1e3



def _four_on_a_switch(*, saturated: bool, pin: bool | None = None,
                      ) -> tuple[StageEngine, XInferPolicy, list[int]]:
    """Four relaxed requests on a saturation switch whose band reads them saturated (a
    band near 0, no dwell) or keeping up (the default band), Action 30 ms over the
    table; the engine, the policy and the sizes of the Action forwards it ran."""
    band = SaturationSettings(enter=1e-6, leave=1e-6, dwell=0.0) if saturated else None
    policy = XInferPolicy(rate_table=BATCH4, slots=(4, 4, 8), max_batch=4,
                          saturation_switch=True, saturation=band)
    if pin is not None:
        policy.pin_saturation(pin)
    clock = Clock(1.0)
    backend = BatchingEmulated(BATCH4, clock,
                               slow={f"r{i}": (Stage.ACTION, 0.03) for i in range(4)})
    engine = StageEngine(backend, policy, CONFIG, rate_table=BATCH4, clock=clock)
    _serve(engine, [2.0] * 4)
    sizes = [len(ids) for stage, ids, _ in backend.batches if stage is Stage.ACTION]
    assert sum(sizes) == 4
    return engine, policy, sizes


@pytest.mark.parametrize("saturated", [False, True], ids=["keeps-up", "saturated"])
def test_the_saturation_switch_batches_on_the_engine_only_when_saturated(saturated: bool) -> None:
    """Four relaxed requests: alone while the meter reads the server keeping up, and
    lane batching's batches when its band says saturated (a band near 0 and no dwell
    here); either way the meter reads the Action forwards the engine ran, 30 ms over
    the table."""
    engine, policy, sizes = _four_on_a_switch(saturated=saturated)
    assert (max(sizes) > 1) is saturated, sizes
    assert engine.batch_audit.summary() == {}  # the lanes formed them, not the policy
    summary = policy.saturation
    assert summary is not None and summary["switches"] == int(saturated)
    # Not the table's time, which the meter reads while it has no forward.
    table = policy.predictor.q(Stage.ACTION, (0, 0, 1))
    assert table + 0.01 < summary["unit_s"][Stage.ACTION] < table + 0.03 * 4, summary


def test_a_saturated_switch_runs_a_tight_request_alone_and_batches_the_relaxed_ones() -> None:
    """tight_alone, pinned saturated: the tight request (on time alone, late in full
    batches by the table) runs every stage in a forward of its own; the relaxed ones
    still batch."""
    policy = XInferPolicy(rate_table=BATCH4, slots=(4, 4, 8), max_batch=4,
                          saturation_switch=True, tight_alone=True)
    policy.pin_saturation(True)
    clock = Clock(1.0)
    backend = BatchingEmulated(BATCH4, clock)
    engine = StageEngine(backend, policy, CONFIG, rate_table=BATCH4, clock=clock)
    # About 25 ms of slack alone, where full batches add about 33 ms by this table.
    budgets = [2.0, 2.0, BATCH4.isolated_request_s + CONFIG.delta + 0.025, 2.0, 2.0]
    tight = _serve(engine, budgets)[2].request_id
    sizes = {stage: len(ids) for stage, (ids, _) in _starts(backend, tight).items()}
    assert sizes == {Stage.VIT: 1, Stage.PREFILL: 1, Stage.ACTION: 1}, backend.batches
    assert max(len(ids) for stage, ids, _ in backend.batches if stage is Stage.ACTION) > 1


@pytest.mark.parametrize("pin", [False, True], ids=["pinned-off", "pinned-on"])
def test_a_pinned_switch_serves_its_pin_whatever_its_meter_reads(pin: bool) -> None:
    """The band of each case says the opposite of the pin (near 0: saturated; the
    default: keeping up with four requests), and the pin wins: batches only pinned
    on, while the meter's own reading stays what it measured."""
    engine, policy, sizes = _four_on_a_switch(saturated=not pin, pin=pin)
    assert (max(sizes) > 1) is pin, sizes
    summary = policy.saturation
    assert summary is not None and summary["switches"] == int(not pin)
    assert engine.batching() == "up to 4 a forward while saturated: now " + (
        "saturated" if pin else "one unit a lane")


def test_only_a_saturation_switch_can_be_pinned() -> None:
    policy = XInferPolicy(rate_table=BATCH4, slots=(4, 4, 8), max_batch=4)
    with pytest.raises(ValueError, match="saturation_switch"):
        policy.pin_saturation(True)


@pytest.mark.parametrize(("policy", "batch_when", "switch"), [
    ("xinfer", "saturated", True), ("xinfer_spread", "saturated", True),
    ("xinfer", "always", False), ("fifo", "saturated", False),
    ("xinfer_batch", "saturated", False)])
def test_batch_when_saturated_makes_an_xinfer_policy_by_name_a_saturation_switch(
        policy: str, batch_when: str, switch: bool, caplog: pytest.LogCaptureFixture) -> None:
    """What a server configured with ``torch.batch_when`` builds: XInfer and its
    spreading preset switch; lane batching stays on ``always``; FIFO batches whenever
    units wait, with a warning; a preset that forms its own batches keeps forming."""
    clock = Clock(1.0)
    config = dataclasses.replace(CONFIG, batch_when=batch_when)
    with caplog.at_level("WARNING", logger="xinfer_ros.engine"):
        engine = StageEngine(BatchingEmulated(BATCH4, clock), policy, config,
                             rate_table=BATCH4, clock=clock)
    built = engine.policy
    assert (isinstance(built, XInferPolicy) and built.saturation_switch) is switch
    assert ("applies to XInfer policies" in caplog.text) is (policy == "fifo")
    if switch:
        assert isinstance(built, XInferPolicy) and built.batch_cost is not None
        assert built.batch_cost.max_batch == 4
    else:
        assert engine.batching() == "up to 4 a forward"
    engine.close()
    with pytest.raises(ValueError, match="batch_when must be one of always, saturated"):
        dataclasses.replace(CONFIG, batch_when="sometimes")


def test_an_unsaturated_switch_runs_units_launched_together_on_lanes_of_their_own() -> None:
    """Slots 8,8,8 in batches of 4: two lanes a stage. Four requests prepared before the
    first decision launch two ViT units in it; unsaturated, each runs alone on a lane
    (``Policy.spreads_lanes``), as under unbatched XInfer, where lane batching would
    have run them as one forward and left the other lane idle."""
    policy = XInferPolicy(rate_table=BATCH4, slots=(8, 8, 8), max_batch=4,
                          saturation_switch=True)
    clock = Clock(1.0)
    backend = BatchingEmulated(BATCH4, clock)
    engine = StageEngine(backend, policy, dataclasses.replace(CONFIG, slots=(8, 8, 8)),
                         rate_table=BATCH4, clock=clock)
    _serve(engine, [2.0] * 4)
    summary = policy.saturation
    assert summary is not None and summary["switches"] == 0
    vit = [(ids, t0) for stage, ids, t0 in backend.batches if stage is Stage.VIT]
    assert [len(ids) for ids, _ in vit] == [1, 1, 1, 1], backend.batches
    # The first two started together, on the two lanes.
    assert abs(vit[1][1] - vit[0][1]) < 0.5 * BATCH4.work[Stage.VIT], vit


def test_an_unsaturated_switch_does_not_tick_while_every_lane_of_a_stage_is_taken() -> None:
    """A tick cannot launch beyond the switch's unit per lane (``Policy.at_own_limit``):
    four requests whose ViT units take 0.1 s each on the one ViT lane leave ready work
    waiting for 0.3 s, over which 2 ms ticks would be about 150 decisions; the
    dispatcher decides on events instead."""
    policy = XInferPolicy(rate_table=BATCH4, slots=(4, 4, 8), max_batch=4,
                          saturation_switch=True)
    clock = Clock(1.0)
    backend = BatchingEmulated(BATCH4, clock,
                               slow={f"r{i}": (Stage.VIT, 0.1) for i in range(4)})
    engine = StageEngine(backend, policy, CONFIG, rate_table=BATCH4, clock=clock)
    _serve(engine, [5.0] * 4)
    assert engine.stats()["decisions"] < 60, engine.stats()
