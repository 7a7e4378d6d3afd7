"""Engine behaviour with the emulated backend: completion, ordering, bounds, faults."""

from __future__ import annotations

import logging
import math
import threading
from dataclasses import replace

import numpy as np
import pytest

from xinfer_ros.core.rate_table import RateTable, default_rate_table
from xinfer_ros.core.registry import make_policy
from xinfer_ros.core.stages import Stage
from xinfer_ros.engine import EngineConfig, EngineResult, ExecMode, Overflow, Status, mode_config
from xinfer_ros.model.inputs import RequestInputs

from .helpers import MonitoredBackend, make_engine

TIMEOUT = 10.0


def test_requests_complete_through_all_stages() -> None:
    engine, backend = make_engine()
    with engine:
        futs = [engine.submit(RequestInputs(seed=i), 0.2, f"r{i}") for i in range(6)]
        results = [f.result(TIMEOUT) for f in futs]
    for r in results:
        assert r.status is Status.OK, r.reason
        assert r.emulated
        assert r.actions is not None and r.actions.shape == (16, 14)
        for name in ("vit_ms", "prefill_ms", "action_ms", "output_ms", "prepare_ms"):
            assert getattr(r.timings, name) >= 0, name
        assert r.timings.total_ms >= r.timings.vit_ms + r.timings.prefill_ms + r.timings.action_ms
        # Placeholders differ per seed.
        assert r.actions is not None
    assert results[0].actions is not None and results[1].actions is not None
    assert not np.array_equal(results[0].actions, results[1].actions)
    order = [(rid, s) for rid, s in backend.order if rid == "r0"]
    assert [s for _, s in order] == [Stage.VIT, Stage.PREFILL, Stage.ACTION]


def test_callback_receives_the_result() -> None:
    engine, _ = make_engine()
    got: list[object] = []
    done = threading.Event()

    def cb(result: object) -> None:
        got.append(result)
        done.set()

    with engine:
        fut = engine.submit(RequestInputs(), 0.15, "cb", callback=cb)
        assert done.wait(TIMEOUT)
    assert got[0] is fut.result(TIMEOUT)


def _overtake(mode: ExecMode) -> tuple[float, float]:
    """Finish times of a heavy request and a light one submitted just after it."""
    engine, _ = make_engine("fifo", mode_config(mode, EngineConfig(slots=(2, 2, 2))))
    with engine:
        slow = engine.submit(RequestInputs(work_factor=12.0), 2.0, "slow")
        while engine.stats()["running"][Stage.VIT] == 0:  # slow's round has begun
            engine.clock.sleep(0.001)
        fast = engine.submit(RequestInputs(work_factor=1.0), 2.0, "fast")
        rs, rf = slow.result(TIMEOUT), fast.result(TIMEOUT)
    assert rs.ok and rf.ok
    return rs.finished, rf.finished


def test_no_round_barrier_fast_request_overtakes_slow_one() -> None:
    slow_end, fast_end = _overtake(ExecMode.ASYNC)
    assert fast_end < slow_end


def test_lockstep_barrier_holds_fast_request_behind_slow_round() -> None:
    slow_end, fast_end = _overtake(ExecMode.LOCKSTEP)
    assert fast_end > slow_end


@pytest.mark.parametrize("mode", list(ExecMode))
def test_slots_are_never_exceeded(mode: ExecMode) -> None:
    cfg = mode_config(mode, EngineConfig(slots=(2, 1, 3), max_live=64))
    engine, backend = make_engine("fifo", cfg)
    with engine:
        # Budgets long enough for the serial queue: nothing is shed as expired.
        futs = [engine.submit(RequestInputs(), 5.0, f"r{i}") for i in range(24)]
        results = [f.result(TIMEOUT) for f in futs]
    assert all(r.ok for r in results)
    slots = cfg.effective_slots
    assert all(p <= s for p, s in zip(backend.peak, slots, strict=True)), backend.peak
    if mode is ExecMode.SERIAL:
        assert backend.peak_total == 1
    else:
        assert backend.peak_total > 1  # concurrency is actually used
    assert engine.stats()["running"] == [0, 0, 0]


def test_backpressure_bound_rejects_beyond_max_live() -> None:
    engine, _ = make_engine(config=EngineConfig(slots=(1, 1, 1), max_live=4))
    with engine:
        futs = []
        for i in range(12):
            futs.append(engine.submit(RequestInputs(work_factor=5.0), 5.0, f"r{i}"))
            assert engine.live_count() <= 4
        results = [f.result(TIMEOUT) for f in futs]
    rejected = [r for r in results if r.status is Status.REJECTED]
    assert len(rejected) >= 8 - 1  # the first few may complete while others arrive
    assert all("backpressure" in r.reason for r in rejected)
    assert sum(r.ok for r in results) >= 4


def test_backpressure_shed_oldest_sheds_waiting_work() -> None:
    cfg = EngineConfig(slots=(1, 1, 1), max_live=3, overflow=Overflow.SHED_OLDEST)
    engine, _ = make_engine(config=cfg)
    with engine:
        futs = [engine.submit(RequestInputs(work_factor=4.0), 1.0, f"r{i}") for i in range(10)]
        for _ in range(10):
            assert engine.live_count() <= 3
        results = [f.result(TIMEOUT) for f in futs]
    shed = [r for r in results if r.status is Status.SHED]
    assert shed and all("backpressure" in r.reason for r in shed)
    assert results[-1].ok  # the newest request is the one kept


def test_failing_stage_fails_only_its_request_and_releases_slots() -> None:
    engine, _ = make_engine(config=EngineConfig(slots=(1, 1, 1)), fail={"bad": Stage.PREFILL})
    with engine:
        futs = {rid: engine.submit(RequestInputs(), 1.0, rid) for rid in ("a", "bad", "b", "c")}
        results = {rid: f.result(TIMEOUT) for rid, f in futs.items()}
        assert engine.stats()["running"] == [0, 0, 0]
        assert not engine.policy.requests
    assert results["bad"].status is Status.ERROR
    assert "prefill" in results["bad"].reason and "injected fault" in results["bad"].reason
    assert all(results[r].ok for r in ("a", "b", "c"))


def test_an_internal_error_on_an_event_fails_only_the_request_it_concerns() -> None:
    engine, _ = make_engine(config=EngineConfig(slots=(1, 1, 1)))
    observe_end = engine.audit.observe_end

    def faulty(rid: int, stage: Stage, now: float) -> None:
        if rid == 2 and stage is Stage.VIT:  # the second request's first unit event
            raise RuntimeError("bookkeeping bug")
        observe_end(rid, stage, now)

    engine.audit.observe_end = faulty  # type: ignore[method-assign]
    with engine:
        futs = [engine.submit(RequestInputs(), 1.0, robot) for robot in ("a", "bad", "b")]
        results = [f.result(TIMEOUT) for f in futs]
        assert engine.stats()["running"] == [0, 0, 0] and engine.running
    assert results[1].status is Status.ERROR
    assert results[1].reason == "internal error: RuntimeError: bookkeeping bug"
    assert results[0].ok and results[2].ok


@pytest.mark.parametrize(("inputs", "budget", "needle"), [
    (RequestInputs(work_factor=-1), 0.1, "work_factor"),
    (RequestInputs(), 0.0, "budget"),
    (RequestInputs(), math.nan, "budget"),
    (RequestInputs(), True, "budget"),
])
def test_invalid_request_is_rejected_alone(inputs: RequestInputs, budget: float,
                                           needle: str) -> None:
    engine, _ = make_engine()
    with engine:
        bad = engine.submit(inputs, budget, "bad").result(TIMEOUT)
        good = engine.submit(RequestInputs(), 0.2, "good").result(TIMEOUT)
    assert bad.status is Status.REJECTED and needle in bad.reason
    assert good.ok


def test_cancel_robot_at_next_stage_boundary() -> None:
    engine, _ = make_engine(config=EngineConfig(slots=(1, 1, 1)))
    with engine:
        fut = engine.submit(RequestInputs(work_factor=10.0), 5.0, "gone")
        other = engine.submit(RequestInputs(), 5.0, "stays")
        # Wait until the ViT unit runs, then cancel: it completes, nothing later runs.
        while engine.stats()["running"][Stage.VIT] == 0:
            engine.clock.sleep(0.001)
        engine.cancel("gone")
        r = fut.result(TIMEOUT)
        assert other.result(TIMEOUT).ok
    assert r.status is Status.SHED and "cancelled" in r.reason
    assert r.timings.vit_ms > 0
    assert math.isnan(r.timings.prefill_ms) and math.isnan(r.timings.action_ms)


def test_supersede_sheds_the_robots_older_request() -> None:
    engine, _ = make_engine(config=EngineConfig(slots=(1, 1, 1)))
    with engine:
        first = engine.submit(RequestInputs(work_factor=5.0), 5.0, "r")
        second = engine.submit(RequestInputs(), 5.0, "r")
        r1, r2 = first.result(TIMEOUT), second.result(TIMEOUT)
    assert r1.status is Status.SHED and "superseded" in r1.reason
    assert r2.ok


def test_policy_switch_keeps_live_requests() -> None:
    engine, _ = make_engine("xinfer", EngineConfig(slots=(2, 2, 2)))
    with engine:
        before = [engine.submit(RequestInputs(work_factor=3.0), 2.0, f"a{i}") for i in range(6)]
        assert engine.set_policy("edf").result(TIMEOUT) == "edf"
        after = [engine.submit(RequestInputs(), 2.0, f"b{i}") for i in range(6)]
        results = [f.result(TIMEOUT) for f in before + after]
        assert engine.policy.name == "edf"
    assert all(r.ok for r in results), [r.reason for r in results]


def test_unknown_policy_switch_fails_cleanly() -> None:
    engine, _ = make_engine()
    with engine:
        with pytest.raises(ValueError):
            engine.set_policy("nope").result(TIMEOUT)
        assert engine.submit(RequestInputs(), 0.2, "x").result(TIMEOUT).ok


def test_closed_engine_rejects() -> None:
    engine, _ = make_engine()
    engine.close()
    r = engine.submit(RequestInputs(), 0.1, "late").result(TIMEOUT)
    assert r.status is Status.REJECTED and "closed" in r.reason


def test_serial_mode_config() -> None:
    cfg = mode_config("serial", EngineConfig(slots=(4, 4, 6)))
    assert cfg.effective_slots == (1, 1, 1) and cfg.serial_device and not cfg.cpu_overlap
    assert replace(cfg, intra_stage=True).effective_slots == (4, 4, 6)


def test_switches_change_at_run_time_without_dropping_requests() -> None:
    engine, backend = make_engine("fifo", EngineConfig(slots=(2, 2, 2)))
    with engine:
        first = [engine.submit(RequestInputs(), 2.0, f"a{i}") for i in range(6)]
        cfg = engine.set_switches(intra_stage=False, cross_stage=False,
                                  cpu_overlap=False).result(TIMEOUT)
        assert cfg.serial_device and cfg.effective_slots == (1, 1, 1)
        assert all(f.result(TIMEOUT).ok for f in first)
        backend.peak_total = 0
        later = [engine.submit(RequestInputs(), 2.0, f"b{i}") for i in range(4)]
        assert all(f.result(TIMEOUT).ok for f in later)
        assert backend.peak_total == 1  # serialised after the switch


def test_table6_configurations() -> None:
    from xinfer_ros.engine import TABLE6, ablation_config

    off = ablation_config("all-off")
    assert off.serial_device and off.round_barrier and not off.cpu_overlap
    full = ablation_config("M+C+R+G")
    assert full == mode_config("async")
    assert len(TABLE6) == 6


def _queue_of_twelve(cfg: EngineConfig) -> tuple[list[EngineResult], EngineResult,
                                                 MonitoredBackend]:
    """12 simultaneous 60 ms budgets on FIFO, then one request once they are all done."""
    engine, backend = make_engine("fifo", config=cfg)
    with engine:
        futs = [engine.submit(RequestInputs(seed=i), 0.06, f"r{i}") for i in range(12)]
        results = [f.result(TIMEOUT) for f in futs]
        assert engine.live_count() == 0
        # The engine recovers: a new request after the overload is served.
        late = engine.submit(RequestInputs(seed=99), 0.2, "after").result(TIMEOUT)
    return results, late, backend


@pytest.mark.parametrize("shed_expired", [True, False])
def test_requests_past_their_deadline_before_starting_are_shed(shed_expired: bool) -> None:
    # One slot per stage and 12 simultaneous 60 ms budgets: the queue is far longer
    # than any budget, so the tail of it can no longer meet a deadline.
    results, late, _ = _queue_of_twelve(EngineConfig(slots=(1, 1, 1),
                                                     shed_expired=shed_expired))
    assert late.ok
    shed = [r for r in results if r.status is Status.SHED]
    if shed_expired:
        assert shed and all("deadline passed" in r.reason for r in shed)
        assert results[0].ok  # the head of the queue is still served
        for r in shed:  # dropped while waiting: no chunk is ever produced for it
            assert r.actions is None
    else:
        assert not shed and all(r.ok for r in results)


def test_shed_doomed_drops_the_tail_once_predicted_late_not_at_its_deadline() -> None:
    # The queue above: requests that wait while the head runs are predicted (at the load
    # running now, no queueing counted) to answer past their deadline well before it.
    results, late, backend = _queue_of_twelve(EngineConfig(slots=(1, 1, 1),
                                                           shed_doomed=True))
    assert late.ok and results[0].ok
    doomed = [r for r in results if r.status is Status.SHED]
    assert doomed and all(r.reason.startswith("predicted to answer after its deadline at the "
                                              "present load (budget 60 ms)") for r in doomed)
    for r in doomed:  # answered before the deadline it could not meet, with no chunk
        assert r.timings.total_ms < 60.0 and r.actions is None
    # Their early stages never ran: a ViT unit per answered request (and at most one
    # request shed after its ViT).
    vits = sum(1 for _, stage in backend.order if stage is Stage.VIT)
    assert vits <= len(results) - len(doomed) + 1 + 1  # + the request after


def test_shed_doomed_without_shed_expired_is_refused() -> None:
    with pytest.raises(ValueError, match="shed_doomed needs shed_expired"):
        EngineConfig(shed_doomed=True, shed_expired=False)


def test_a_running_request_is_never_shed_as_doomed() -> None:
    from concurrent.futures import Future

    from xinfer_ros.core.request import Request
    from xinfer_ros.engine.admission import LiveRequest, LiveTable

    table = LiveTable(8, Overflow.REJECT, True)
    waiting, running = (LiveRequest(i, f"r{i}", Request(request_id=i, robot_id=f"r{i}",
                                                        arrival=0.0, budget=0.1),
                                    None, None, Future(), 0.0, arrival=0.0, expires_at=0.1)
                        for i in (1, 2))
    for live in (waiting, running):
        live.policy = make_policy("fifo")
        table.admit(live)
    running.running = Stage.VIT
    asked: list[int] = []

    def finish(live: LiveRequest) -> float:
        asked.append(live.rid)
        return 1.0  # both predicted past their 0.1 s expiry

    assert table.take_doomed(finish) == [waiting]
    assert asked == [1] and table.take_doomed(finish) == []


def test_a_budget_shorter_than_the_service_alone_is_served_late_not_shed(
        caplog: pytest.LogCaptureFixture) -> None:
    """Shedding a request that cannot be on time only has its robot resend one that
    cannot be on time either (the eager-π0-on-a-GPU churn, docs/BENCHMARKS.md)."""
    table = default_rate_table().with_work_scaled(
        (4.0, 4.0, 4.0), "margins above a loaded host's scheduling jitter")
    service = table.isolated_request_s
    # Two requests at once, one slot per stage: the second waits for the first's Action
    # (until about 1.2 x service), past its window of 0.9 x service - δ, yet well within
    # one service after it (about 1.6 x service).
    budget = 0.9 * service
    engine, _ = make_engine("fifo", config=EngineConfig(slots=(1, 1, 1)), table=table)
    with caplog.at_level(logging.WARNING, logger="xinfer_ros.engine"), engine:
        futs = [engine.submit(RequestInputs(seed=i), budget, f"r{i}") for i in range(2)]
        results = [f.result(TIMEOUT) for f in futs]
        engine.submit(RequestInputs(seed=9), 0.2, "feasible").result(TIMEOUT)
    assert [r.status for r in results] == [Status.OK, Status.OK], [r.reason for r in results]
    assert results[1].timings.total_ms > budget * 1e3  # served late, not shed
    # Said once for that budget, never for one the device can meet.
    notes = [r.getMessage() for r in caplog.records if "cannot be on time" in r.getMessage()]
    assert len(notes) == 1 and f"budget {budget * 1e3:.0f} ms" in notes[0], notes


def test_lane_that_cannot_start_fails_its_requests_instead_of_hanging() -> None:
    """A failing lane initializer (e.g. a CUDA device that cannot be set) must not hang."""
    from .helpers import MonitoredBackend

    class BrokenLanes(MonitoredBackend):
        def lane_setup(self, lane):  # type: ignore[no-untyped-def]
            # Every lane that would run Action units: the Action lanes and the fast
            # path's (a lone request runs its Action there).
            if lane.group in ("action", "fast"):
                raise ValueError("Expected a cuda device with a specified index")

    engine, _ = make_engine(backend_cls=BrokenLanes)
    with engine:
        first = engine.submit(RequestInputs(seed=1), 0.5, "r0").result(TIMEOUT)
        second = engine.submit(RequestInputs(seed=2), 0.5, "r1").result(TIMEOUT)
    for result in (first, second):
        assert result.status is Status.ERROR
        assert "lane action/" in result.reason and "could not start" in result.reason
        assert "specified index" in result.reason


def test_results_carry_arrival_deadline_and_release_time() -> None:
    from xinfer_ros.core.constants import DELTA
    from xinfer_ros.core.timing import deadline

    engine, _ = make_engine()
    with engine:
        ok = engine.submit(RequestInputs(seed=1), 0.3, "r1", age=0.050).result(TIMEOUT)
        refused = engine.submit(RequestInputs(seed=2), -0.005, "r2").result(TIMEOUT)
    assert ok.ok and ok.arrival == pytest.approx(ok.submitted - 0.050, abs=1e-9)
    assert ok.deadline == deadline(ok.arrival, 0.300, DELTA)
    assert ok.release_at == ok.finished and ok.hold_s == 0.0  # phase spreading is off
    assert refused.status is Status.REJECTED and math.isnan(refused.deadline)
    assert refused.release_at == refused.finished


def test_the_policy_schedules_by_the_deadline_the_result_carries() -> None:
    # "late" reached the server 80 ms before "early" but is submitted (prepared, handed
    # to the policy) after it: the policy must still see its true arrival.
    engine, _ = make_engine()
    seen: dict[str, float] = {}
    add = engine.policy.add_request

    def spy(request, t):
        seen[request.robot_id] = request.deadline
        return add(request, t)

    engine.policy.add_request = spy
    with engine:
        early = engine.submit(RequestInputs(seed=1), 0.3, "early")
        late = engine.submit(RequestInputs(seed=2), 0.3, "late", age=0.080)
        results = {"early": early.result(TIMEOUT), "late": late.result(TIMEOUT)}
    assert results["late"].arrival < results["early"].arrival
    assert seen == {name: r.deadline for name, r in results.items()}


def test_phase_spreading_holds_only_late_ok_results_and_within_their_deadline() -> None:
    from xinfer_ros.core.constants import DELTA, SEND_PERIOD

    cfg = EngineConfig(slots=(4, 4, 6), phase_spread=True, phase_spread_margin=0.010)
    engine, _ = make_engine(config=cfg)
    spreader = engine.releases.spreader
    assert spreader is not None
    release_time = spreader.release_time

    def other_robot_where_r1_would_land(robot: str, ready: float, arrival: float,
                                        limit: float) -> float:
        # r2's phase sits where r1's next request lands if released at once: the
        # widest gap's middle is then half a period later.
        spreader.record_arrival("r2", ready + DELTA)
        return release_time(robot, ready, arrival, limit)

    spreader.release_time = other_robot_where_r1_would_land  # type: ignore[method-assign]
    with engine:
        # Arrived 250 ms ago: later than T_E, with a second of budget left to hold in.
        late = engine.submit(RequestInputs(seed=1), 1.5, "r1", age=0.250).result(TIMEOUT)
        # Arrived 150 ms before a deadline it can only just make: held to the margin.
        tight = engine.submit(RequestInputs(seed=2), 0.42, "r1", age=0.250).result(TIMEOUT)
        fresh = engine.submit(RequestInputs(seed=3), 1.5, "r1").result(TIMEOUT)
        failed = engine.submit(RequestInputs(seed=4, work_factor=-1.0), 1.5, "r1",
                               age=0.250).result(TIMEOUT)
    assert late.ok and late.hold_s == pytest.approx(SEND_PERIOD / 2, abs=1e-9)
    assert tight.ok and tight.hold_s > 0.0 and tight.release_at <= tight.deadline - 0.010
    assert fresh.ok and fresh.hold_s == 0.0  # within T_E of its arrival: phase kept
    assert not failed.ok and failed.hold_s == 0.0
    assert engine.stats()["held"] == 2


@pytest.mark.parametrize(("lazy", "peak", "peak_total"), [("stage", [1, 1, 1], 3),
                                                          ("device", [1, 1, 1], 1)])
def test_lazy_slots_runs_requests_with_slack_one_unit_per_stage_or_device(
        lazy: str, peak: list[int], peak_total: int) -> None:
    # Six requests with ample budgets: none is ever protected, so each stage (the
    # whole device) runs one unit at a time; eagerly they fill the spare slots.
    for mode in ("off", lazy):
        cfg = EngineConfig(slots=(2, 2, 3), lazy_slots=mode, fast_path=False)
        engine, backend = make_engine("xinfer", cfg)
        with engine:
            assert engine.policy.lazy_slots == mode  # type: ignore[attr-defined]
            futs = [engine.submit(RequestInputs(), 5.0, f"r{i}") for i in range(6)]
            assert all(f.result(TIMEOUT).ok for f in futs)
        if mode == "off":
            assert max(backend.peak) > 1, backend.peak
        else:
            assert backend.peak == peak and backend.peak_total <= peak_total, backend.peak


def test_lazy_slots_warns_for_a_policy_without_slack_and_it_fills_every_slot(
        caplog: pytest.LogCaptureFixture) -> None:
    engine, backend = make_engine("fifo", EngineConfig(slots=(2, 2, 3), lazy_slots="stage",
                                                       fast_path=False))
    with engine:
        futs = [engine.submit(RequestInputs(), 5.0, f"r{i}") for i in range(6)]
        assert all(f.result(TIMEOUT).ok for f in futs)
    assert "lazy_slots applies to XInfer policies: fifo" in caplog.text
    assert max(backend.peak) > 1


@pytest.mark.parametrize("slots, warned", [((4, 4, 1), True), ((2, 2, 1), False)])
def test_lanes_past_the_tables_bounds_are_named_at_start(
        caplog: pytest.LogCaptureFixture, slots: tuple[int, int, int], warned: bool) -> None:
    # A table calibrated with at most 2,2,1 units side by side (the H100's CUDA-graph
    # table).
    base = default_rate_table()
    table = RateTable.from_function(base.rate, work=base.work, overhead=base.overhead,
                                    h_out=base.h_out, bounds=(2, 2, 1))
    cfg = EngineConfig(slots=slots)
    with caplog.at_level(logging.WARNING, logger="xinfer_ros.engine"):
        engine, _ = make_engine("fifo", cfg, table=table)
        with engine:
            pass
    named = [r.getMessage() for r in caplog.records if "side by side" in r.getMessage()]
    assert bool(named) is warned
    if warned:
        # An emulated engine prefixes its lines with the emulation notice.
        assert [m.split("] ", 1)[-1] for m in named] == [
            "the engine runs up to 4,4,1 lanes per stage (ViT, Prefill, Action) but its "
            "rate table measured at most 2,2,1 side by side: beyond that the predictor "
            "takes the rate at the bound and cannot see what the extra units cost; "
            "calibrate with those bounds or serve on fewer slots"]


def test_an_unknown_lazy_slots_setting_stops_the_engine_config() -> None:
    with pytest.raises(ValueError, match="lazy_slots must be one of off, stage, device"):
        EngineConfig(lazy_slots="on")
