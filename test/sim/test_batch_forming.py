"""The simulator runs the batch-forming XInfer policy (issue 28)."""

from __future__ import annotations

from pathlib import Path

import pytest

from xinfer_ros.config_paths import config_dir
from xinfer_ros.core.errors import RateTableError
from xinfer_ros.sim.engine_loop import SimConfig, Simulation

BATCH4 = str(config_dir() / "rate_table_cpu_pi0_tiny_batch4.json")
UNBATCHED = str(config_dir() / "rate_table_cpu_pi0_tiny.json")


def cfg(**kw) -> SimConfig:
    base = {"policy": "xinfer_batch", "workload": "phases", "robots": 8, "duration": 12.0,
            "window": (2.0, 12.0), "slots": (4, 4, 8), "max_batch": 4,
            "rate_table": BATCH4}
    return SimConfig(**{**base, **kw})


def test_policy_forms_the_simulated_batches_and_every_request_is_answered():
    sim = Simulation(cfg())
    sizes: list[int] = []
    former = sim.gpu.former
    assert former is not None

    def record(stage, keys, t):
        members, start_by = former(stage, keys, t)
        assert set(members) <= set(keys)
        sizes.append(len(members))
        return members, start_by

    sim.gpu.former = record
    result = sim.run()
    assert result.metrics.responses == result.metrics.requests > 0
    assert max(sizes) > 1  # units do run together
    assert max(sizes) <= 4
    assert result.metrics.attainment > 0.5


def test_the_policy_and_the_gpu_must_agree_on_max_batch():
    with pytest.raises(ValueError, match="max_batch 2"):
        Simulation(cfg(max_batch=2, policy_kwargs={"max_batch": 4}))


def test_batch_forming_on_a_table_without_batch_dimension_is_refused():
    with pytest.raises(RateTableError, match="batch size 1 only"):
        Simulation(cfg(rate_table=UNBATCHED))


def test_other_policies_keep_the_lanes_batching():
    sim = Simulation(cfg(policy="fifo"))
    assert sim.gpu.former is None


@pytest.mark.parametrize("policy", ["xinfer_batch", "xinfer_batch_deferred"])
def test_a_held_lead_starts_with_its_mates_or_at_its_start_by(policy):
    """Deferred units may start after it when more urgent units take every lane first.

    Deferred, a waiting unit looks all to do at every decision, so a tight unit (never
    held) can take the lane a relaxed lead was held for; the default never starts late.
    """
    sim = Simulation(cfg(policy=policy))
    gpu, former, policy = sim.gpu, sim.gpu.former, sim.policy
    assert former is not None
    holds: dict[object, float] = {}  # lead -> first start_by
    started: dict[object, float] = {}  # lead -> start time
    late: list[tuple[object, float, float]] = []
    # Per stage: (start time, deadline of the batch's lead) of every batch started.
    batches: list[list[tuple[float, float]]] = [[], [], []]
    deadline: dict[object, float] = {}
    held_at: dict[object, float] = {}  # lead -> when it was first held

    def record(stage, keys, t):
        members, start_by = former(stage, keys, t)
        lead = members[0]
        if start_by - t >= gpu.min_hold:
            holds.setdefault((stage, lead), start_by)
            held_at.setdefault((stage, lead), t)
            deadline[(stage, lead)] = policy.requests[lead].deadline
        return members, start_by

    start = gpu._start

    def record_start(stage, units, t, *, open_):
        batches[stage].append((t, policy.requests[units[0].key].deadline))
        for unit in units:
            held = (stage, unit.key)
            if held in holds:
                started[held] = t
                if t > holds[held] + 1e-9:
                    late.append((held, holds[held], t))
        return start(stage, units, t, open_=open_)

    gpu.former = record
    gpu._start = record_start
    result = sim.run()
    assert result.metrics.responses == result.metrics.requests > 0
    assert holds and set(started) == set(holds)  # every held lead started
    if policy == "xinfer_batch":
        assert not late, late[:5]
    for held, start_by, t in late:  # only more urgent batches went before a late lead
        ahead = [d for t0, d in batches[held[0]] if held_at[held] <= t0 < t]
        assert ahead and max(ahead) < deadline[held], (held, start_by, t, ahead)
    assert len(late) <= len(holds) // 10, late[:5]
    # Some waited until a mate came, some until their start_by.
    assert any(started[k] < holds[k] - 1e-9 for k in holds)
    assert any(abs(started[k] - holds[k]) < 1e-9 for k in holds)


def test_the_policy_is_told_when_each_simulated_batch_starts():
    sim = Simulation(cfg(policy="xinfer_batch_deferred", robots=6, duration=6.0,
                         window=(1.0, 6.0)))
    gpu, policy = sim.gpu, sim.policy
    assert policy.defer_batched_units
    told: list[tuple[int, tuple[object, ...], float]] = []
    on_start = gpu.on_start
    assert on_start is not None

    def record(stage, keys, t):
        on_start(stage, keys, t)
        told.append((stage, tuple(keys), t))
        units = [policy.tracker.units[k] for k in keys]
        assert all(u.compute_start == t + policy.predictor.h[stage] for u in units)
        assert all(policy.tracker.work_done(u, t) == 0.0 for u in units)

    ran: list[tuple[int, tuple[object, ...], float]] = []
    start = gpu._start

    def record_start(stage, units, t, *, open_):
        ran.append((stage, tuple(u.key for u in units), t))
        return start(stage, units, t, open_=open_)

    gpu.on_start = record
    gpu._start = record_start
    result = sim.run()
    assert result.metrics.responses == result.metrics.requests > 0
    assert told and ran == told  # every batch, formed by the policy, told once at its start


def test_gated_units_launch_only_into_lanes_the_simulated_batches_left_free():
    """``xinfer_batch_gated``: no launch into a stage whose lanes all run started batches."""
    sim = Simulation(cfg(policy="xinfer_batch_gated", robots=12))
    policy = sim.policy
    assert policy.lane_gate
    schedule = policy.schedule
    held_back = 0  # decisions where the gate kept ready units in the ready queue
    over: list[tuple[float, int, int, int]] = []

    def checked(t):
        nonlocal held_back
        counts = tuple(policy.tracker.counts)
        limits = [policy._launch_limit(s) for s in range(3)]
        ready = [len(policy.ready_queue(s)) for s in range(3)]
        out = schedule(t)
        for s in range(3):
            n = sum(1 for x in out.launches if x.stage == s)
            if n > max(0, limits[s] - counts[s]):
                over.append((t, s, n, limits[s] - counts[s]))
            if ready[s] and limits[s] < policy.slots[s] and counts[s] >= limits[s]:
                held_back += 1
        return out

    policy.schedule = checked
    result = sim.run()
    assert result.metrics.responses == result.metrics.requests > 0
    assert not over, over[:5]
    assert held_back > 0  # the load was high enough for the gate to act


def test_batching_under_pressure_forms_batches_only_past_saturation():
    """``xinfer_batch_pressure``: lone units at 3 robots, batches and more goodput at 12.

    At 3 robots no stage's backlog is served better in batches, so every batch is one
    unit, as unbatched XInfer on the same table runs them; at 12 the stages are under
    pressure and batches both form and serve more requests in time than unbatched
    XInfer on the lanes as slots (1, 1, 2).
    """
    def sizes_and_metrics(policy, robots, **kw):
        sim = Simulation(cfg(policy=policy, robots=robots, duration=20.0,
                             window=(5.0, 20.0), **kw))
        sizes: list[int] = []
        former = getattr(sim.gpu, "former", None)  # an unbatched GPU has none
        if former is not None:
            def record(stage, keys, t):
                members, start_by = former(stage, keys, t)
                if start_by <= t:
                    sizes.append(len(members))
                return members, start_by

            sim.gpu.former = record
        return sizes, sim.run().metrics

    sizes, low = sizes_and_metrics("xinfer_batch_pressure", 3)
    # Unpressed launched units may share a batch when two free lanes' units are planned
    # together; at 3 robots on this table (deterministic: no noise) that never happens.
    assert sizes and max(sizes) == 1
    _, alone = sizes_and_metrics("xinfer", 3, slots=(1, 1, 2), max_batch=1)
    assert low.attainment >= alone.attainment - 0.02
    sizes, high = sizes_and_metrics("xinfer_batch_pressure", 12)
    assert max(sizes) > 1
    _, unbatched = sizes_and_metrics("xinfer", 12, slots=(1, 1, 2), max_batch=1)
    assert high.goodput_rps > 1.2 * unbatched.goodput_rps


def test_the_saturation_switch_runs_unbatched_xinfer_until_saturated_then_lane_batches():
    """``xinfer_batch_switch`` in the simulator: at 3 robots it decides as unbatched
    XInfer on the lanes as slots (1, 1, 2) and keeps as many requests; at 12 its meter,
    fed the simulated forwards, reads the lanes saturated and it keeps as many as lane
    batching (plain XInfer on 4,4,8 with max_batch 4) and more than unbatched XInfer."""
    def run(policy, robots, **kw):
        sim = Simulation(cfg(policy=policy, robots=robots, duration=20.0,
                             window=(5.0, 20.0), **kw))
        assert getattr(sim.gpu, "former", None) is None  # the lanes batch, not the policy
        return sim, sim.run().metrics

    sim, low = run("xinfer_batch_switch", 3)
    summary = sim.policy.saturation
    assert summary is not None and summary["switches"] == 0
    _, alone = run("xinfer", 3, slots=(1, 1, 2), max_batch=1)
    assert low.attainment == pytest.approx(alone.attainment, abs=0.02)
    sim, high = run("xinfer_batch_switch", 12)
    summary = sim.policy.saturation
    assert summary is not None and summary["saturated_share"] > 0.5, summary
    # Read from the simulated forwards, not the table's unit beside one other.
    assert summary["unit_s"][2] != pytest.approx(sim.policy._unit_alone(2), rel=0.01)
    _, lane = run("xinfer", 12)
    _, unbatched = run("xinfer", 12, slots=(1, 1, 2), max_batch=1)
    assert high.attainment >= lane.attainment - 0.02
    assert high.goodput_rps > unbatched.goodput_rps


def test_the_tight_switch_runs_its_tight_units_alone_in_the_simulator():
    """``xinfer_batch_switch_tight`` at 12 robots, saturated: tight units ran in
    forwards within their limits, and the others still batched."""
    sim = Simulation(cfg(policy="xinfer_batch_switch_tight", robots=12, duration=20.0,
                         window=(5.0, 20.0)))
    gpu = sim.gpu
    issue = gpu.issue
    tight: list = []
    sizes: list[int] = []
    pop = gpu.pop_finished
    start = gpu._start
    mixed: list = []

    def spy_start(stage, units, t, *, open_, cap=0):
        # A tight batch holds tight units only, an ordinary one ordinary units only.
        if any(bool(u.limit) != bool(cap) for u in units):
            mixed.append((stage, t, cap, [u.limit for u in units]))
        return start(stage, units, t, open_=open_, cap=cap)

    join = gpu._join

    def spy_join(batch, unit):
        if bool(unit.limit) != bool(batch.cap):
            mixed.append((batch.stage, batch.started, batch.cap, unit.limit))
        return join(batch, unit)

    def spy_issue(key, stage, t, **kw):
        unit = issue(key, stage, t, **kw)
        if kw.get("limit"):
            tight.append(unit)
        return unit

    def spy_pop(t):
        unit = pop(t)
        sizes.append(unit.batch)
        return unit

    gpu.issue = spy_issue
    gpu.pop_finished = spy_pop
    gpu._start = spy_start
    gpu._join = spy_join
    metrics = sim.run().metrics
    assert metrics.responses > 0 and len(tight) > 10
    assert all(1 <= u.batch <= u.limit for u in tight)
    assert any(u.batch == 1 for u in tight)
    assert not mixed, mixed[:5]
    assert max(sizes) > 1


@pytest.mark.parametrize("spread", [False, True], ids=["no-spread", "phase-spread"])
@pytest.mark.parametrize(("slots", "lanes"), [((4, 4, 8), (1, 1, 2)), ((8, 8, 8), (2, 2, 2))],
                         ids=["one-lane-vit", "two-lanes-a-stage"])
def test_the_switch_never_saturated_is_unbatched_xinfer_on_its_lanes_exactly(slots, lanes,
                                                                             spread):
    """With a band it never enters, ``xinfer_batch_switch`` in batches of 4 makes
    unbatched XInfer's decisions on its lanes as slots: every client record the same, at
    8 robots, where unbatched XInfer misses some, with phase spreading as
    ``config/fleet.yaml`` serves it or without.

    On 4,4,8 (lanes 1,1,2) the protected work Algorithm 2 counts matters: the switch once
    counted protected ready units up to the slots rather than the lanes, and kept 2.4 %
    more here (and, on the engine, fewer). On 8,8,8 every stage has two lanes, so units of
    one instant meet at ViT and Prefill too and must spread over them
    (``Policy.spreads_lanes``): batched together instead, the switch kept 525 of 592
    requests where unbatched XInfer kept 489 of 585."""
    from xinfer_ros.core.saturation import SaturationSettings

    never = SaturationSettings(enter=1e6, leave=1e6)
    base = {"workload": "phases", "robots": 8, "duration": 20.0, "window": (5.0, 20.0),
            "phase_spread": spread, "keep_records": True}
    sw = Simulation(cfg(policy="xinfer_batch_switch", slots=slots,
                        policy_kwargs={"saturation": never}, **base)).run()
    unb = Simulation(cfg(policy="xinfer", slots=lanes, max_batch=1, **base)).run()
    assert unb.metrics.requests - unb.metrics.on_time >= 10  # decisions matter here
    assert (sw.metrics.requests, sw.metrics.on_time) == (unb.metrics.requests,
                                                         unb.metrics.on_time)
    assert sw.records and sw.records == unb.records


def test_the_switch_on_its_band_keeps_its_mode_with_its_dwell(tmp_path):
    """At a load the meter reads on the band (phases 6 on the CPU table with its work
    slowed 1.3x, as on the slow host of docs/data/cpu-2026-12-06-switch/pair6), the
    switch without a dwell changes mode back and forth (11 times in 30 s); with the
    default dwell it stays in one mode."""
    import json

    from xinfer_ros.core.saturation import SaturationSettings

    table = json.loads(Path(BATCH4).read_text())
    table["work_ms"] = {s: w * 1.3 for s, w in table["work_ms"].items()}
    slow = tmp_path / "slow.json"
    slow.write_text(json.dumps(table))
    switches = {}
    for dwell in (0.0, SaturationSettings().dwell):
        sim = Simulation(cfg(policy="xinfer_batch_switch", rate_table=str(slow), noise=0.1,
                             robots=6, seed=1, duration=30.0, window=(5.0, 30.0),
                             policy_kwargs={"saturation": SaturationSettings(dwell=dwell)}))
        sim.run()
        summary = sim.policy.saturation  # type: ignore[attr-defined]
        switches[dwell] = summary["switches"]
    assert switches[0.0] >= 6, switches
    assert switches[SaturationSettings().dwell] <= 2, switches
