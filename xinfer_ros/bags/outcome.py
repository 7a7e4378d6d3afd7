"""What a replay sent and received, as the ROS-free report, figure and golden writer read it.

The player (:class:`xinfer_ros.nodes.bag_player.PlayResult`) lives in ``nodes`` (it
needs rclpy); these Protocols say what ``bags`` reads of it, so that the report is
built and tested from any object of that shape.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from xinfer_ros.bags.scan import RecordedChunk

__all__ = ["ReplayOutcome", "SentLike"]


class SentLike(Protocol):
    """A request as the player sent it."""

    @property
    def seq(self) -> int:
        """Sequence number."""

    @property
    def send_ns(self) -> int:
        """Wall-clock send time, ns."""

    @property
    def budget_ms(self) -> float:
        """The budget it carried."""

    @property
    def bag_ns(self) -> int:
        """The point of the recording's time line it was sent at, ns."""

    @property
    def data(self) -> bytes:
        """Its CDR bytes."""


class ReplayOutcome(Protocol):
    """What one replay sent and received."""

    @property
    def sent(self) -> Mapping[str, Sequence[SentLike]]:
        """Per robot, the requests in send order."""

    @property
    def chunks(self) -> Mapping[str, Mapping[int, RecordedChunk]]:
        """Per robot, the first answer to each seq."""

    @property
    def published(self) -> Mapping[str, int]:
        """Messages published per topic kind."""

    @property
    def max_lag_s(self) -> float:
        """Largest delay of a publication behind its schedule."""

    @property
    def lags_s(self) -> Sequence[float]:
        """Every recorded message's delay behind its schedule, in publish order."""

    @property
    def stopped(self) -> bool:
        """Whether the replay was stopped early."""

    @property
    def duplicates(self) -> int:
        """Answers to a seq already answered."""
