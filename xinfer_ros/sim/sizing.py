"""Sizing a site: how many servers of one rate table a fleet of N robots needs.

The answer comes from the simulator, under the assignment rule a multi-server fleet
uses (:func:`xinfer_ros.fleet.assignment.assign` for equal servers): every server gets
a share of ``N // S`` or ``N // S + 1`` robots with tight-budget robots spread evenly,
so every server sees the same workload mix. First the ERC of one server on the workload is
searched; ``S = ceil(N / ERC)`` servers are then checked by simulating each share
size, and one more server is added while a share fails (passing is not monotone in
the robot count, so a share at or below the ERC can still fail).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from xinfer_ros.core.constants import ATTAINMENT_TARGET
from xinfer_ros.core.metrics import WindowMetrics
from xinfer_ros.sim.erc import Criterion, ErcResult, passes, search_erc

__all__ = ["SitePlan", "plan_site", "shares"]

#: Servers added beyond ``ceil(N / ERC)`` before the plan gives up.
_MAX_EXTRA_SERVERS = 4


@dataclass(frozen=True)
class SitePlan:
    """The servers a fleet needs.

    Attributes:
        robots: Fleet size N.
        erc: One server's ERC on the workload (0: none passes at any tested count).
        servers: Servers needed, or None when no plan passed.
        shares: Robots per server under the assignment rule.
        verdicts: Per simulated share size, each round's pass/fail.
        single: The ERC search of one server.
    """

    robots: int
    erc: int
    servers: int | None
    shares: tuple[int, ...]
    verdicts: dict[int, list[bool]] = field(default_factory=dict)
    single: ErcResult | None = None


def shares(robots: int, servers: int) -> tuple[int, ...]:
    """Robots per server when ``robots`` are dealt round-robin to ``servers``.

    Raises:
        ValueError: When either count is below 1.
    """
    if robots < 1 or servers < 1:
        raise ValueError(f"need robots >= 1 and servers >= 1, got {robots}, {servers}")
    base, extra = divmod(robots, servers)
    return tuple(base + 1 if i < extra else base for i in range(servers) if base or i < extra)


def plan_site(robots: int, evaluate: Callable[[int], Iterable[WindowMetrics]],
              criterion: Criterion, *, lo: int = 4, hi: int = 40,
              patience: int = 1, target: float = ATTAINMENT_TARGET) -> SitePlan:
    """Plan the servers of a fleet of ``robots``.

    Args:
        robots: Fleet size N.
        evaluate: Simulates every round of one server at a robot count.
        criterion: Acceptance criterion of a server.
        lo: First count of the one-server ERC walk.
        hi: Last count of the walk.
        patience: Failing counts in a row that end the walk.
        target: Attainment a round must reach under :attr:`Criterion.ATTAINMENT`
            (raised by the simulator's measured error band, ``xinfer-sim plan
            --engine-check``).

    Raises:
        ValueError: When ``robots < 1``.
    """
    if robots < 1:
        raise ValueError(f"robots must be >= 1, got {robots}")
    single = search_erc(evaluate, criterion, min(lo, hi), hi, patience=patience, target=target)
    seen: dict[int, list[bool]] = dict(single.verdicts)  # counts the walk simulated

    def verdicts(n: int) -> list[bool]:
        if n not in seen:
            seen[n] = [passes(m, criterion, target) for m in evaluate(n)]
        return seen[n]
    if single.erc == 0:
        return SitePlan(robots, 0, None, (), dict(seen), single)
    first = math.ceil(robots / single.erc)
    for servers in range(first, first + _MAX_EXTRA_SERVERS + 1):
        split = shares(robots, servers)
        if all(all(verdicts(n)) for n in sorted(set(split))):
            return SitePlan(robots, single.erc, servers, split, dict(seen), single)
    return SitePlan(robots, single.erc, None, shares(robots, first + _MAX_EXTRA_SERVERS),
                    dict(seen), single)
