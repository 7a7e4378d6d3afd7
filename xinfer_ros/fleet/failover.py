"""How a fleet came through the loss of one server: figures from observed chunks.

A robot belonged to the failed server when the last chunk it received before the
failure came from that server. The failover time is the span from the failure until
every such robot has received an OK chunk from another server; the attainment dip
compares requests sent just before the failure with those sent just after.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from xinfer_ros.core.metrics import ResponseRecord

__all__ = ["Failover", "failover", "takeover_gaps"]

#: Answers as the fleet monitor keeps them: receipt time (s), server, OK.
Answer = tuple[float, str, bool]


@dataclass(frozen=True)
class Failover:
    """Figures of one server's failure.

    Attributes:
        server: The failed server.
        at: When it failed (s, the run's clock).
        robots: The robots it served then.
        recovered_s: Per robot, failure to its first OK chunk from another server
            (``None``: none came).
        attainment_before: Attainment of requests sent in the ``span`` before the failure.
        attainment_after: Attainment of requests sent in the ``span`` after it.
        span: Length of those two windows (s).
    """

    server: str
    at: float
    robots: tuple[str, ...]
    recovered_s: dict[str, float | None]
    attainment_before: float
    attainment_after: float
    span: float

    @property
    def failover_s(self) -> float | None:
        """Until every robot of the failed server was served again.

        ``None`` when one never was; 0.0 when the server served none.
        """
        times = list(self.recovered_s.values())
        if any(t is None for t in times):
            return None
        return max((t for t in times if t is not None), default=0.0)

    def to_dict(self) -> dict[str, object]:
        """The report's ``failover`` entry."""
        return {"server": self.server, "at_s": self.at, "robots": list(self.robots),
                "failover_s": self.failover_s, "recovered_s": dict(self.recovered_s),
                "attainment_before": self.attainment_before,
                "attainment_after": self.attainment_after, "span_s": self.span}


def _attainment(records: Sequence[ResponseRecord]) -> float:
    return sum(r.on_time for r in records) / len(records) if records else math.nan


def failover(server: str, at: float, answers: Mapping[str, Sequence[Answer]],
             records: Sequence[ResponseRecord], span: float = 5.0) -> Failover:
    """The figures of ``server`` failing at ``at``.

    Args:
        server: The failed server's name.
        at: When it failed (s, the clock of ``answers`` and ``records``).
        answers: Per robot, every chunk it received.
        records: Every request of the fleet (unanswered ones included).
        span: Length of the attainment windows before and after the failure (s).
    """
    robots = []
    for robot, seen in answers.items():
        before = [a for a in seen if a[0] < at]
        if before and before[-1][1] == server:
            robots.append(robot)
    recovered: dict[str, float | None] = {}
    for robot in robots:
        after = [t for t, source, ok in answers[robot] if t >= at and ok and source != server]
        recovered[robot] = min(after) - at if after else None
    return Failover(server, at, tuple(robots), recovered,
                    _attainment([r for r in records if at - span <= r.send_time < at]),
                    _attainment([r for r in records if at <= r.send_time < at + span]), span)


def takeover_gaps(server: str, at: float, answers: Mapping[str, Sequence[Answer]]
                  ) -> dict[str, float]:
    """How long robots that ``server`` took over at ``at`` went without an OK chunk.

    A robot was taken over when its last chunk before ``at`` came from another server
    and ``server`` answered it after ``at``. Its gap runs from its last OK chunk before
    the first OK chunk of ``server`` to that chunk (s).
    """
    gaps = {}
    for robot, seen in answers.items():
        before = [a for a in seen if a[0] < at]
        after = [a for a in seen if a[0] >= at]
        if not before or before[-1][1] == server or all(a[1] != server for a in after):
            continue
        first = next((t for t, source, ok in after if ok and source == server), None)
        last = max((t for t, _, ok in seen if ok and first is not None and t < first),
                   default=None)
        if first is not None and last is not None:
            gaps[robot] = first - last
    return gaps
