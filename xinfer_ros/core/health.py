"""Health of one robot's service, as an operator's diagnostics show it (ROS-free).

The inference server turns these levels into ``diagnostic_msgs`` statuses; they follow
ROS's levels: OK, WARN, ERROR and STALE (nothing heard for too long).
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass

from xinfer_ros.core.constants import ATTAINMENT_TARGET

__all__ = ["Health", "HealthLimits", "Level", "robot_health"]


class Level(enum.IntEnum):
    """Diagnostic levels, numbered as ``diagnostic_msgs/DiagnosticStatus``."""

    OK = 0
    WARN = 1
    ERROR = 2
    STALE = 3


@dataclass(frozen=True)
class HealthLimits:
    """When a robot's service stops being OK.

    Attributes:
        stale_after_s: No message from the robot for this long: STALE.
        error_threshold: This many rejected or failed requests in the window: ERROR.
        target: Attainment below this (with requests in the window): WARN.
    """

    stale_after_s: float = 2.0
    error_threshold: int = 3
    target: float = ATTAINMENT_TARGET


@dataclass(frozen=True)
class Health:
    """A level and the line an operator reads."""

    level: Level
    message: str


def robot_health(silent_s: float, requests: int, errors: int, attainment: float,
                 *, last_error: str = "", limits: HealthLimits = HealthLimits()) -> Health:
    """The diagnostic of one robot over the statistics window.

    Args:
        silent_s: Seconds since the robot's last message (``inf``: never heard).
        requests: Requests in the window.
        errors: Of those, rejected or failed ones.
        attainment: On-time fraction of the window's requests (NaN without requests).
        last_error: Reason of the latest non-OK chunk, for the message.
        limits: The thresholds.
    """
    if silent_s > limits.stale_after_s:
        heard = "never heard from" if math.isinf(silent_s) else f"silent for {silent_s:.1f} s"
        return Health(Level.STALE, heard)
    if errors >= limits.error_threshold:
        why = f": {last_error}" if last_error else ""
        return Health(Level.ERROR, f"{errors} of {requests} requests failed{why}")
    if requests and attainment < limits.target:
        return Health(Level.WARN, f"attainment {attainment:.1%} below {limits.target:.0%}")
    return Health(Level.OK, "ok" if requests else "no requests in the window")
