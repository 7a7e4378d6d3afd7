"""The fleet manager's state, free of ROS: live servers, robots' budgets, the assignment.

Servers announce themselves with heartbeats; a server unheard for ``server_timeout_s``
(or one that says it is not accepting) is gone. The assignment
(:func:`xinfer_ros.fleet.assignment.assign`) is recomputed only when the set of live
servers, their capacities or their allowlists change, never because a robot's budget
moved: budgets only decide where a robot that has to move goes. A server that failed
rejoins only after beating steadily for ``rejoin_after_s``. Each change raises the
epoch by one and says why.

A server name belongs to the node first heard with it (each heartbeat says who sent it,
``Heartbeat.source``) until that node falls silent: a second node claiming the name
meanwhile (a misconfigured server, or a fake one) is refused, and both are reported
(:meth:`Roster.conflicts`), so it cannot take the first one's robots.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from xinfer_ros.fleet.assignment import ServerOffer, assign, moved, tight_robots

__all__ = ["CONFLICT_MEMORY_S", "REJOIN_AFTER_S", "SERVER_TIMEOUT_S", "Change",
           "Heartbeat", "NameConflict", "Roster"]

#: A server unheard this long has failed (s): four heartbeats of 0.2 s.
SERVER_TIMEOUT_S = 0.8
#: A failed server heard again takes robots back only after beating this long (s), so a
#: server that stalls now and then does not pull robots back and forth.
REJOIN_AFTER_S = 2.0
#: A refused claim to a server name is reported this long after its latest heartbeat (s).
CONFLICT_MEMORY_S = 10.0


@dataclass(frozen=True)
class Heartbeat:
    """One server announcement.

    Attributes:
        server: The server's name.
        at: When it was received (s, monotonic).
        capacity: Robots it can serve; 0: no limit stated.
        candidates: Its allowlist (empty: any robot).
        serving: The robots it answered lately (seeds a restarted manager).
        attainment: Its attainment over them (NaN: none answered).
        accepting: False when it cannot take requests.
        source: Who sent it (the publishing node's identity); "" when unknown, which
            claims nothing.
    """

    server: str
    at: float
    capacity: int = 0
    candidates: frozenset[str] = frozenset()
    serving: tuple[str, ...] = ()
    attainment: float = math.nan
    accepting: bool = True
    source: str = ""

    def offer(self) -> ServerOffer:
        """What the assignment rule needs of it."""
        return ServerOffer(self.server, self.capacity, self.candidates)


@dataclass(frozen=True)
class NameConflict:
    """Two nodes claiming one server name.

    Attributes:
        server: The name.
        holder: The node that has it (heard first, still beating).
        claimant: The node refused.
        since: Its first refused heartbeat (s, monotonic).
        last: Its latest refused heartbeat (s, monotonic).
    """

    server: str
    holder: str
    claimant: str
    since: float
    last: float


@dataclass(frozen=True)
class Change:
    """A new assignment.

    Attributes:
        epoch: Its number (1 for the first).
        assignment: Robot -> server (``None``: unassigned).
        offers: The live servers it was made for.
        moved: Robots whose server changed.
        reason: What caused it.
    """

    epoch: int
    assignment: dict[str, str | None]
    offers: tuple[ServerOffer, ...]
    moved: list[str]
    reason: str

    def robots_per_server(self) -> dict[str, int]:
        """How many robots each live server got."""
        return {o.name: sum(s == o.name for s in self.assignment.values())
                for o in self.offers}

    @property
    def unassigned(self) -> list[str]:
        """Robots no server has room for."""
        return [r for r, s in self.assignment.items() if s is None]


@dataclass
class Roster:
    """Live servers and the assignment; call :meth:`update` periodically.

    Attributes:
        robots: The fleet's robots.
        server_timeout_s: A server unheard this long is gone (s).
        budget_window_s: Time constant of each robot's mean budget (s).
        rejoin_after_s: A failed server must beat this long before it rejoins (s).
    """

    robots: Sequence[str]
    server_timeout_s: float = SERVER_TIMEOUT_S
    budget_window_s: float = 60.0
    rejoin_after_s: float = REJOIN_AFTER_S
    heartbeats: dict[str, Heartbeat] = field(default_factory=dict)
    assignment: dict[str, str | None] = field(default_factory=dict)
    epoch: int = 0
    #: Server -> when it was found gone (s, monotonic), for reports.
    lost: dict[str, float] = field(default_factory=dict)
    _mean_budget: dict[str, tuple[float, float]] = field(default_factory=dict)
    _key: tuple | None = None
    _live: tuple[ServerOffer, ...] = ()
    #: Failed servers heard again -> since when.
    _returning: dict[str, float] = field(default_factory=dict)
    #: (server, claimant) -> the refused claim.
    _conflicts: dict[tuple[str, str], NameConflict] = field(default_factory=dict)

    def heard(self, beat: Heartbeat) -> bool:
        """Record a server's announcement; False when it was refused.

        It is refused when another node holds the name and was heard within
        ``server_timeout_s`` (see :meth:`conflicts`).
        """
        previous = self.heartbeats.get(beat.server)
        if (previous is not None and beat.source and previous.source
                and previous.source != beat.source
                and beat.at - previous.at <= self.server_timeout_s):
            key = (beat.server, beat.source)
            known = self._conflicts.get(key)
            self._conflicts[key] = NameConflict(beat.server, previous.source, beat.source,
                                                known.since if known else beat.at, beat.at)
            return False
        if not beat.accepting:
            self._returning.pop(beat.server, None)
        elif beat.server in self.lost and (
                beat.server not in self._returning or previous is None
                or beat.at - previous.at > self.server_timeout_s):
            self._returning[beat.server] = beat.at  # back, or back again after a silence
        self.heartbeats[beat.server] = beat
        return True

    def conflicts(self, now: float) -> list[NameConflict]:
        """Refused claims heard within :data:`CONFLICT_MEMORY_S`, by name and claimant."""
        for key in [k for k, c in self._conflicts.items() if now - c.last > CONFLICT_MEMORY_S]:
            del self._conflicts[key]
        return [self._conflicts[k] for k in sorted(self._conflicts)]

    def budget(self, robot: str, budget_s: float, now: float) -> None:
        """Fold a robot's current budget (s) into its running mean."""
        if robot not in self.robots or not math.isfinite(budget_s) or budget_s <= 0:
            return
        mean, at = self._mean_budget.get(robot, (budget_s, now))
        weight = 1.0 - math.exp(-max(0.0, now - at) / self.budget_window_s)
        self._mean_budget[robot] = (mean + (budget_s - mean) * weight, now)

    def live(self, now: float) -> tuple[ServerOffer, ...]:
        """The servers heard within the timeout and accepting, by name.

        A server that failed counts again once it has beaten for ``rejoin_after_s``.
        """
        return tuple(b.offer() for name, b in sorted(self.heartbeats.items())
                     if now - b.at <= self.server_timeout_s and b.accepting
                     and (name not in self.lost
                          or now - self._returning.get(name, now) >= self.rejoin_after_s))

    def update(self, now: float) -> Change | None:
        """Recompute the assignment if the live servers changed; ``None`` if not."""
        offers = self.live(now)
        key = tuple((o.name, o.capacity, tuple(sorted(o.candidates))) for o in offers)
        if key == self._key:
            return None
        reason = self._why(offers)
        live = {o.name for o in offers}
        for offer in self._live:
            if offer.name not in live:
                self.lost.setdefault(offer.name, now)
        for offer in offers:
            self.lost.pop(offer.name, None)
            self._returning.pop(offer.name, None)
        # Until some robot has a server, start from what the servers report serving.
        previous = self.assignment if any(self.assignment.values()) else self._seed()
        tight = tight_robots({r: m for r, (m, _) in self._mean_budget.items()})
        after = assign(list(self.robots), offers, previous, tight)
        self._key, self._live = key, offers
        changed = moved(self.assignment, after) if self.assignment else list(after)
        self.assignment = after
        self.epoch += 1
        return Change(self.epoch, dict(after), offers, changed, reason)

    def _seed(self) -> dict[str, str | None]:
        """A restarted manager's starting point: what the servers say they serve."""
        seed: dict[str, str | None] = {}
        for name, beat in sorted(self.heartbeats.items()):
            for robot in beat.serving:
                seed.setdefault(robot, name)
        return seed

    def _why(self, offers: tuple[ServerOffer, ...]) -> str:
        """What changed from the live servers of the assignment in force to ``offers``."""
        before = {o.name: o for o in self._live}
        after = {o.name: o for o in offers}
        parts = []
        for name in sorted(before.keys() - after.keys()):
            beat = self.heartbeats.get(name)
            if beat is not None and not beat.accepting:
                parts.append(f"{name} stopped accepting")
            else:
                parts.append(f"{name} lost (no heartbeat for {self.server_timeout_s:g} s)")
        parts += [f"{name} {'rejoined' if name in self.lost else 'joined'} (capacity "
                  f"{after[name].capacity or 'unstated'})"
                  for name in sorted(after.keys() - before.keys())]
        parts += [f"{name} changed its capacity or allowlist"
                  for name in sorted(after.keys() & before.keys()) if after[name] != before[name]]
        if self._key is None:
            parts.insert(0, "first assignment")
        return "; ".join(parts) or "no servers"
