"""Which server serves which robot: the fleet manager's rule, free of ROS.

:func:`assign` maps robots to live servers so that

* no server gets more robots than its capacity (0 states none: no limit);
* load is balanced by capacity: robots go one at a time to the server whose load
  fraction (robots / capacity) stays lowest, so a server twice as large gets twice the
  robots, and equal servers get equal shares (±1); a server stating no capacity counts
  as large as the largest stated one;
* robots with tight budgets are spread evenly, in proportion to each server's share;
* assignments are sticky: a robot stays on its previous server while that server is
  live, may serve it and is within its share. A server that joins takes only the robots
  its share needs; a failed server's robots are the only ones that move;
* as many robots as capacities and allowlists allow are served (robots move aside for
  one only a full server may serve); the others (the fleet exceeds total capacity, or
  no live server has them on its allowlist) are unassigned (``None``), never silently
  overloaded.

The result is deterministic: the same inputs give the same assignment (names break ties).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

__all__ = ["ASSIGNMENT_TOPIC", "SERVERS_TOPIC", "ServerOffer", "assign", "moved", "shares",
           "tight_robots"]

#: The servers' heartbeats (ServerStatus), relative to the site's namespace.
SERVERS_TOPIC = "xinfer/servers"
#: The fleet manager's latched assignment (FleetAssignment), relative likewise.
ASSIGNMENT_TOPIC = "xinfer/assignment"


@dataclass(frozen=True)
class ServerOffer:
    """A live server as the manager sees it.

    Attributes:
        name: The server's ``server_name``.
        capacity: Robots it can serve within the SLO; 0 states no limit.
        candidates: The robots it may serve (its allowlist); empty: any robot.
    """

    name: str
    capacity: int = 0
    candidates: frozenset[str] = frozenset()

    def may_serve(self, robot: str) -> bool:
        """Whether ``robot`` is on this server's allowlist."""
        return not self.candidates or robot in self.candidates


def _room(offer: ServerOffer, fleet: int) -> int:
    """The most robots it takes: a server stating no capacity can take the whole fleet."""
    return offer.capacity if offer.capacity > 0 else fleet


def _weights(offers: Sequence[ServerOffer]) -> dict[str, float]:
    """The capacity each load fraction is taken of.

    A server stating none counts as the largest stated one (all equal when none states).
    """
    stated = [o.capacity for o in offers if o.capacity > 0]
    return {o.name: float(o.capacity or max(stated, default=1)) for o in offers}


def shares(robots: int, offers: Sequence[ServerOffer]) -> dict[str, int]:
    """Robots per server when ``robots`` are balanced by load fraction within capacity.

    Raises:
        ValueError: When ``robots`` is negative.
    """
    if robots < 0:
        raise ValueError(f"robots must be >= 0, got {robots}")
    count = {o.name: 0 for o in offers}
    weight = _weights(offers)
    ordered = sorted(offers, key=lambda o: o.name)
    for _ in range(robots):
        open_ = [o for o in ordered if count[o.name] < _room(o, robots)]
        if not open_:
            break
        best = min(open_, key=lambda o: ((count[o.name] + 1) / weight[o.name], o.name))
        count[best.name] += 1
    return count


def tight_robots(mean_budget_s: Mapping[str, float]) -> frozenset[str]:
    """Robots whose mean budget lies below the midpoint of the fleet's range.

    With every robot at one budget (or none known) no robot is tight.
    """
    values = [v for v in mean_budget_s.values() if math.isfinite(v)]
    if not values or max(values) - min(values) <= 1e-9:
        return frozenset()
    middle = (max(values) + min(values)) / 2
    return frozenset(r for r, v in mean_budget_s.items() if math.isfinite(v) and v < middle)


def assign(robots: Sequence[str], offers: Sequence[ServerOffer],
           previous: Mapping[str, str | None] | None = None,
           tight: Collection[str] = ()) -> dict[str, str | None]:
    """The robot -> server assignment (``None``: unassigned); see the module docstring.

    Args:
        robots: Every robot of the fleet.
        offers: The live servers.
        previous: The assignment in force (robots on servers not in ``offers`` move).
        tight: Robots with tight budgets, spread evenly.

    Raises:
        ValueError: When a robot or a server name repeats.
    """
    if len(set(robots)) != len(robots):
        raise ValueError(f"robot names repeat: {list(robots)}")
    if len({o.name for o in offers}) != len(offers):
        raise ValueError(f"server names repeat: {[o.name for o in offers]}")
    previous = previous or {}
    by_name = {o.name: o for o in offers}
    eligible = [r for r in robots if any(o.may_serve(r) for o in offers)]
    target = shares(len(eligible), offers)
    tight_set = set(tight) & set(eligible)
    # Tight robots per server in proportion to its share (at least as many as fit).
    tight_target = {n: math.ceil(len(tight_set) * t / max(1, len(eligible)))
                    for n, t in target.items()}
    result: dict[str, str | None] = dict.fromkeys(robots)
    count = dict.fromkeys(by_name, 0)
    tight_count = dict.fromkeys(by_name, 0)

    def place(robot: str, server: str) -> None:
        result[robot] = server
        count[server] += 1
        tight_count[server] += robot in tight_set

    # Sticky: each server keeps its previous robots up to its share, tight ones up to
    # their share first so that a shrinking share keeps the mix even.
    for name, offer in sorted(by_name.items()):
        mine = [r for r in eligible if previous.get(r) == name and offer.may_serve(r)]
        keep_tight = [r for r in mine if r in tight_set][:tight_target[name]]
        for robot in keep_tight:
            place(robot, name)
        for robot in [r for r in mine if r not in keep_tight]:
            if count[name] < target[name]:
                place(robot, name)
    # The rest go where the share (then the capacity) has most room: robots fewer servers
    # may serve first, then tight ones.
    rest = [r for r in eligible if result[r] is None]
    options = {r: sum(o.may_serve(r) for o in offers) for r in rest}
    for robot in sorted(rest, key=lambda r: (options[r], r not in tight_set, robots.index(r))):
        servers = [o for o in by_name.values() if o.may_serve(robot)]
        under = [o for o in servers if count[o.name] < target[o.name]] or \
            [o for o in servers if count[o.name] < _room(o, len(eligible))]
        if not under:
            continue
        if robot in tight_set:
            best = min(under, key=lambda o: (tight_count[o.name] / max(1, target[o.name]),
                                             count[o.name] / max(1, target[o.name]), o.name))
        else:
            best = min(under, key=lambda o: (count[o.name] / max(1, target[o.name]), o.name))
        place(robot, best.name)
    # Allowlists can leave a robot out while others could move aside to make room for
    # it: serve as many robots as the capacities and allowlists allow.
    rooms = {o.name: _room(o, len(eligible)) for o in offers}
    for robot in [r for r in eligible if result[r] is None]:
        _augment(robot, result, count, rooms, by_name)
    return result


def _augment(robot: str, result: dict[str, str | None], count: dict[str, int],
             rooms: Mapping[str, int], offers: Mapping[str, ServerOffer]) -> None:
    """Place ``robot`` by moving a chain of robots to servers with room, if one exists.

    Breadth first over servers, so the chain moves as few robots as possible.
    """
    start = sorted(n for n, o in offers.items() if o.may_serve(robot))
    parent: dict[str, tuple[str, str] | None] = dict.fromkeys(start)  # server -> (from, robot)
    queue = list(start)
    while queue:
        server = queue.pop(0)
        if count[server] < rooms[server]:
            # Walk the chain back: each robot moves one server along it.
            count[server] += 1
            link = parent[server]
            while link is not None:
                source, mover = link
                result[mover] = server
                server, link = source, parent[source]
            result[robot] = server
            return
        for mover in sorted(r for r, s in result.items() if s == server):
            for target in sorted(n for n, o in offers.items() if o.may_serve(mover)):
                if target not in parent:
                    parent[target] = (server, mover)
                    queue.append(target)


def moved(before: Mapping[str, str | None], after: Mapping[str, str | None]) -> list[str]:
    """Robots whose server differs between two assignments (in ``after``'s order)."""
    return [r for r, s in after.items() if before.get(r) != s]
