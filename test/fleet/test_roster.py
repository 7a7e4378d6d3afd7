"""The roster's claim on server names: one node per name while it beats."""

from __future__ import annotations

from xinfer_ros.fleet.roster import CONFLICT_MEMORY_S, Heartbeat, Roster

ROBOTS = ["r1", "r2", "r3"]


def beat(server: str, at: float, source: str, capacity: int = 1) -> Heartbeat:
    return Heartbeat(server, at, capacity, frozenset(ROBOTS), source=source)


def test_a_second_node_with_a_taken_name_is_refused_and_reported() -> None:
    roster = Roster(ROBOTS, server_timeout_s=0.8)
    assert roster.heard(beat("a", 0.0, "node1", capacity=1))
    assert not roster.heard(beat("a", 0.1, "node2", capacity=3))
    assert not roster.heard(beat("a", 0.3, "node2", capacity=3))
    assert roster.heard(beat("a", 0.2, "node1", capacity=1))
    change = roster.update(0.4)
    assert change is not None and [o.capacity for o in change.offers] == [1]
    [conflict] = roster.conflicts(0.4)
    assert (conflict.server, conflict.holder, conflict.claimant) == ("a", "node1", "node2")
    assert (conflict.since, conflict.last) == (0.1, 0.3)
    assert roster.conflicts(0.3 + CONFLICT_MEMORY_S + 0.1) == []


def test_a_restarted_server_takes_its_name_back_once_the_old_node_is_silent() -> None:
    roster = Roster(ROBOTS, server_timeout_s=0.8)
    assert roster.heard(beat("a", 0.0, "old"))
    assert not roster.heard(beat("a", 0.5, "new"))   # the old one may still be beating
    assert roster.heard(beat("a", 0.9, "new"))       # silent 0.9 s > 0.8 s: the name is free
    assert not roster.heard(beat("a", 1.0, "old"))   # now the old one is the intruder


def test_heartbeats_without_a_source_claim_nothing() -> None:
    roster = Roster(ROBOTS)
    assert roster.heard(beat("a", 0.0, ""))
    assert roster.heard(beat("a", 0.1, "node1"))
    assert roster.heard(beat("a", 0.2, ""))
