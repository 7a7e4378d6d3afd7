"""The fleet manager's assignment rule and its state (no ROS)."""

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from xinfer_ros.core.metrics import ResponseRecord
from xinfer_ros.fleet.assignment import ServerOffer, assign, moved, shares, tight_robots
from xinfer_ros.fleet.failover import failover, takeover_gaps
from xinfer_ros.fleet.roster import REJOIN_AFTER_S, Heartbeat, Roster

ROBOTS = [f"r{i:02d}" for i in range(12)]


def _load(assignment: dict[str, str | None]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for server in assignment.values():
        if server is not None:
            counts[server] = counts.get(server, 0) + 1
    return counts


@settings(max_examples=200, deadline=None)
@given(robots=st.integers(0, 40), caps=st.lists(st.integers(0, 15), min_size=0, max_size=5),
       tight=st.sets(st.integers(0, 39)), seed=st.lists(st.integers(0, 4), max_size=40))
def test_within_capacity_all_placed_when_room_and_stable(robots, caps, tight, seed) -> None:
    names = [f"r{i}" for i in range(robots)]
    offers = [ServerOffer(f"s{i}", c) for i, c in enumerate(caps)]
    previous = {n: f"s{k}" for n, k in zip(names, seed, strict=False)}
    tight_names = {f"r{i}" for i in tight if i < robots}
    result = assign(names, offers, previous, tight_names)
    load = _load(result)
    for offer in offers:
        assert offer.capacity == 0 or load.get(offer.name, 0) <= offer.capacity
    room = math.inf if any(c == 0 for c in caps) else sum(caps)
    placed = sum(load.values())
    assert placed == (min(robots, room) if offers else 0)
    # Balanced by load fraction: equal servers differ by one robot at most.
    if caps and len(set(caps)) == 1 and caps[0] == 0:
        assert max(load.values(), default=0) - min(load.get(o.name, 0) for o in offers) <= 1
    # The same inputs with the result as the previous assignment change nothing.
    assert assign(names, offers, result, tight_names) == result


@settings(max_examples=150, deadline=None)
@given(robots=st.integers(1, 5), caps=st.lists(st.integers(0, 3), min_size=1, max_size=3),
       allow=st.lists(st.sets(st.integers(0, 4)), min_size=3, max_size=3),
       seed=st.lists(st.integers(0, 3), max_size=5))
def test_as_many_robots_as_allowlists_and_capacities_allow_are_served(
        robots, caps, allow, seed) -> None:
    import itertools

    names = [f"r{i}" for i in range(robots)]
    offers = [ServerOffer(f"s{i}", c, frozenset(f"r{k}" for k in allow[i]))
              for i, c in enumerate(caps)]
    previous = {n: f"s{k}" for n, k in zip(names, seed, strict=False)}
    result = assign(names, offers, previous)
    for robot, server in result.items():
        assert server is None or next(o for o in offers if o.name == server).may_serve(robot)
    load = _load(result)
    assert all(o.capacity == 0 or load.get(o.name, 0) <= o.capacity for o in offers)
    # Brute force: the most robots any assignment could serve.
    best = 0
    for choice in itertools.product([None, *offers], repeat=robots):
        counts: dict[str, int] = {}
        ok = True
        for robot, offer in zip(names, choice, strict=True):
            if offer is None:
                continue
            counts[offer.name] = counts.get(offer.name, 0) + 1
            ok &= offer.may_serve(robot) and (
                offer.capacity == 0 or counts[offer.name] <= offer.capacity)
        if ok:
            best = max(best, sum(c is not None for c in choice))
    assert sum(load.values()) == best


def test_shares_follow_capacity_and_stop_at_it() -> None:
    assert shares(6, [ServerOffer("a"), ServerOffer("b")]) == {"a": 3, "b": 3}
    assert shares(9, [ServerOffer("a", 12), ServerOffer("b", 6)]) == {"a": 6, "b": 3}
    assert shares(30, [ServerOffer("a", 12), ServerOffer("b", 6)]) == {"a": 12, "b": 6}
    with pytest.raises(ValueError):
        shares(-1, [])


def test_a_joining_server_takes_only_its_share_and_a_lost_ones_robots_alone_move() -> None:
    one = assign(ROBOTS, [ServerOffer("a")])
    assert set(one.values()) == {"a"}
    two = assign(ROBOTS, [ServerOffer("a"), ServerOffer("b")], one)
    assert _load(two) == {"a": 6, "b": 6} and len(moved(one, two)) == 6
    three = assign(ROBOTS, [ServerOffer(n) for n in "abc"], two)
    assert _load(three) == {"a": 4, "b": 4, "c": 4} and len(moved(two, three)) == 4
    after = assign(ROBOTS, [ServerOffer("a"), ServerOffer("c")], three)
    assert sorted(moved(three, after)) == sorted(r for r, s in three.items() if s == "b")
    assert _load(after) == {"a": 6, "c": 6}


def test_tight_robots_spread_evenly_and_the_surplus_is_unassigned() -> None:
    tight = set(ROBOTS[:4])  # the first four: tight budgets, a naive deal would cluster
    result = assign(ROBOTS, [ServerOffer("a", 5), ServerOffer("b", 5)], tight=tight)
    assert _load(result) == {"a": 5, "b": 5}
    assert sorted(sum(result[r] == s for r in tight) for s in "ab") == [2, 2]
    assert sum(s is None for s in result.values()) == 2


def test_allowlists_are_respected() -> None:
    offers = [ServerOffer("a", 0, frozenset({"r00", "r01"})), ServerOffer("b", 1)]
    result = assign(["r00", "r01", "r02", "r03"], offers)
    assert result["r02"] == "b" and result["r03"] is None
    assert {result["r00"], result["r01"]} == {"a"}
    with pytest.raises(ValueError, match="repeat"):
        assign(["x", "x"], offers)


def test_tight_robots_are_those_below_the_middle_of_the_budget_range() -> None:
    assert tight_robots({"a": 0.09, "b": 0.4, "c": 0.1, "d": 0.3}) == {"a", "c"}
    assert tight_robots({"a": 0.2, "b": 0.2}) == frozenset()
    assert tight_robots({}) == frozenset()


def test_roster_reassigns_on_membership_only_and_says_why() -> None:
    roster = Roster(ROBOTS[:4], server_timeout_s=0.5)
    roster.heard(Heartbeat("a", 0.0))
    roster.heard(Heartbeat("b", 0.0, capacity=3))
    first = roster.update(0.1)
    assert first is not None and first.epoch == 1 and "first assignment" in first.reason
    assert _load(first.assignment) == {"a": 2, "b": 2}
    for robot in ROBOTS[:2]:
        roster.budget(robot, 0.09, 0.2)  # budgets decide where movers go, not a move
    roster.heard(Heartbeat("a", 0.3))
    roster.heard(Heartbeat("b", 0.3, capacity=3))
    assert roster.update(0.4) is None
    roster.heard(Heartbeat("a", 0.6))
    lost = roster.update(0.85)  # b last heard at 0.3: gone after 0.5 s
    assert lost is not None and lost.epoch == 2 and "b lost" in lost.reason
    assert set(lost.moved) == {r for r, s in first.assignment.items() if s == "b"}
    assert set(lost.assignment.values()) == {"a"} and "b" in roster.lost
    roster.heard(Heartbeat("b", 0.9, capacity=3, accepting=False))
    assert roster.update(0.9) is None  # heard, but not accepting: still out
    roster.heard(Heartbeat("a", 1.0))
    roster.heard(Heartbeat("b", 1.0, capacity=1))
    assert roster.update(1.0) is None  # back, but not for REJOIN_AFTER_S yet
    for t in (1.4, 1.8, 2.2, 2.6, 3.0):
        roster.heard(Heartbeat("a", t))
        roster.heard(Heartbeat("b", t, capacity=1))
        change = roster.update(t)
        assert (change is None) == (t - 1.0 < REJOIN_AFTER_S), t
    assert change is not None and "b rejoined" in change.reason
    assert _load(change.assignment)["b"] == 1 and roster.lost == {}


def test_a_restarted_manager_starts_from_what_the_servers_serve() -> None:
    roster = Roster(ROBOTS[:4])
    first = roster.update(0.0)  # before any heartbeat: nobody has a server
    assert first is not None and set(first.assignment.values()) == {None}
    roster.heard(Heartbeat("a", 0.1, serving=("r02", "r03")))
    roster.heard(Heartbeat("b", 0.1, serving=("r00", "r01")))
    change = roster.update(0.1)
    assert change is not None
    assert change.assignment == {"r00": "b", "r01": "b", "r02": "a", "r03": "a"}


def test_failover_figures_from_observed_chunks() -> None:
    answers = {
        "x": [(9.0, "b", True), (10.4, "a", False), (10.9, "a", True)],
        "y": [(9.5, "a", True), (10.2, "a", True)],
        "z": [(9.8, "b", True)],  # never served again
    }
    records = [ResponseRecord(9.5, 9.6, 0.2, ok=True), ResponseRecord(10.1, None, 0.2, ok=False)]
    result = failover("b", 10.0, answers, records, span=1.0)
    assert result.robots == ("x", "z")
    assert result.recovered_s["x"] == pytest.approx(0.9) and result.recovered_s["z"] is None
    assert result.failover_s is None
    assert (result.attainment_before, result.attainment_after) == (1.0, 0.0)
    done = failover("b", 10.0, {k: v for k, v in answers.items() if k != "z"}, records)
    assert done.failover_s == pytest.approx(0.9)
    assert failover("c", 10.0, answers, records).failover_s == 0.0


def test_takeover_gaps_measure_robots_a_server_took_over() -> None:
    answers = {
        # taken over; a's answer to the request abandoned at the switch came first
        "x": [(9.8, "a", True), (10.01, "a", True), (10.05, "b", False), (10.3, "b", True)],
        "y": [(9.9, "a", True), (10.1, "a", True)],  # stayed
        "z": [(9.7, "b", True), (10.2, "b", True)],  # was b's already
    }
    assert takeover_gaps("b", 10.0, answers) == {"x": pytest.approx(0.29)}


@pytest.mark.parametrize(("robots", "servers"), [(60, 4), (38, 2), (7, 3), (19, 1)])
def test_site_sizing_simulates_the_shares_the_manager_assigns(robots, servers) -> None:
    from xinfer_ros.sim.sizing import shares as sizing_shares

    offers = [ServerOffer(f"s{i}") for i in range(servers)]
    assert sorted(shares(robots, offers).values(), reverse=True) == \
        list(sizing_shares(robots, servers))
