"""The live table (admission) and the execution gates, without threads or a backend."""

from __future__ import annotations

from concurrent.futures import Future

import pytest

from xinfer_ros.core.registry import make_policy
from xinfer_ros.core.request import Request
from xinfer_ros.core.stages import Stage
from xinfer_ros.engine.admission import LiveRequest, LiveTable, expiry
from xinfer_ros.engine.gates import ExecutionGates
from xinfer_ros.engine.types import EngineConfig, Overflow, Status


def _live(table: LiveTable, robot: str, submitted: float = 0.0,
          budget: float = 0.1, service: float = 0.0) -> LiveRequest:
    rid = table.next_id()
    request = Request(rid, robot, submitted, budget)
    return LiveRequest(rid, robot, request, None, None, Future(), submitted,
                       arrival=submitted,
                       expires_at=expiry(request.deadline, submitted, service))


def test_full_table_refuses_and_a_robot_supersedes_itself() -> None:
    table = LiveTable(2, Overflow.REJECT, supersede=True)
    a, b = _live(table, "a"), _live(table, "b")
    assert table.admit(a).refused == "" and table.admit(b).refused == ""
    refused = table.admit(_live(table, "c"))
    assert refused.refused.startswith("backpressure: 2 live requests (max_live=2)")
    # A robot's new request replaces its own, so it is admitted even when full.
    a2 = _live(table, "a")
    admission = table.admit(a2)
    assert admission.refused == "" and admission.dropped == (a,)
    assert a.drop == (Status.SHED, "superseded by a newer request of robot a")
    assert len(table) == 2 and set(table.remaining()) == {b, a2}


def test_shed_oldest_picks_the_oldest_unstarted_request() -> None:
    table = LiveTable(2, Overflow.SHED_OLDEST, supersede=False)
    old, started = _live(table, "a", 1.0), _live(table, "b", 0.5)
    started.model_started = True
    table.admit(old)
    table.admit(started)
    new = _live(table, "c", 2.0)
    admission = table.admit(new)
    assert admission.dropped == (old,) and old.drop is not None
    assert old.drop[0] is Status.SHED and "backpressure" in old.drop[1]
    # Nothing unstarted left to shed: refused.
    new.model_started = True
    assert table.admit(_live(table, "d", 3.0)).refused.startswith("backpressure")


def test_closed_table_admits_nothing_and_close_reports_once() -> None:
    table = LiveTable(4, Overflow.REJECT, supersede=True)
    assert table.close() and not table.close()
    assert table.admit(_live(table, "a")).refused == "engine is closed"


def test_take_expired_returns_only_idle_requests_past_their_deadline() -> None:
    table = LiveTable(8, Overflow.REJECT, supersede=False)
    idle, running, preparing = (_live(table, r, 0.0, 0.1) for r in "abc")
    for live in (idle, running, preparing):
        table.admit(live)
    idle.policy = running.policy = make_policy("fifo")
    running.running = Stage.VIT
    # The deadline is a + b - δ (0.096 s), the one contract of core.timing.
    assert table.take_expired(0.095) == []
    assert table.take_expired(0.097) == [idle]
    assert len(table) == 2
    table.retire(running, Status.OK)
    assert table.counts()["OK"] == 1 and len(table) == 1
    assert table.take_robot("c") == [preparing] and len(table) == 0


def test_a_request_that_cannot_be_on_time_alone_expires_one_service_time_late() -> None:
    # Windows 0.096 s and 0.496 s against 0.2 s of service alone: the first counts
    # its window from the earliest answer the device allows (expires after 0.296 s).
    assert expiry(0.096, 0.0, 0.2) == pytest.approx(0.296)
    assert expiry(0.496, 0.0, 0.2) == 0.496
    assert expiry(0.2, 0.0, 0.2) == 0.2  # a window of exactly R_j(0) can be on time
    table = LiveTable(8, Overflow.REJECT, supersede=False)
    hopeless = _live(table, "a", 0.0, 0.1, service=0.2)
    feasible = _live(table, "b", 0.0, 0.5, service=0.2)
    for live in (hopeless, feasible):
        table.admit(live)
        live.policy = make_policy("fifo")
    assert table.take_expired(0.29) == []
    assert table.take_expired(0.30) == [hopeless]
    assert table.take_expired(0.49) == []
    assert table.take_expired(0.50) == [feasible]


@pytest.mark.parametrize(("switch", "blocked"), [
    ({"cross_stage": False}, Stage.ACTION),
    ({"intra_stage": False}, Stage.PREFILL),
    ({"intra_stage": False, "cross_stage": False}, Stage.VIT),
])
def test_gates_apply_the_ablation_switches(switch: dict[str, bool], blocked: Stage) -> None:
    cfg = EngineConfig(slots=(2, 2, 2))
    gates = ExecutionGates(cfg)
    assert gates.allows(blocked, 1, opening=False)
    gates.issued(Stage.VIT, 2, opening=False)
    assert gates.allows(blocked, 1, opening=False)
    gates.reconfigure(EngineConfig(slots=(2, 2, 2), **switch))
    assert not gates.allows(blocked, 1, opening=False)
    gates.completed(Stage.VIT)
    assert gates.allows(blocked, 1, opening=False)


def test_gates_count_slots_and_hold_rounds() -> None:
    gates = ExecutionGates(EngineConfig(slots=(1, 1, 1), round_barrier=True))
    opening = gates.open_round()
    assert opening
    gates.issued(Stage.VIT, 7, opening)
    assert not gates.has_free_slot(Stage.VIT) and not gates.allows(Stage.VIT, 8, opening)
    gates.completed(Stage.VIT)
    # Inside the round only the cohort's Prefill may start.
    assert not gates.open_round()
    assert gates.allows(Stage.PREFILL, 7, opening=False)
    assert not gates.allows(Stage.PREFILL, 8, opening=False)
    gates.issued(Stage.PREFILL, 7, opening=False)
    gates.completed(Stage.PREFILL)
    assert gates.open_round()  # the round's Context is done: a new round opens
