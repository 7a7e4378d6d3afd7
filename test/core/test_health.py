"""A robot's diagnostic level: STALE, ERROR, WARN or OK, with the operator's line."""

import math

from xinfer_ros.core.health import HealthLimits, Level, robot_health


def test_levels_in_order_of_precedence() -> None:
    limits = HealthLimits(stale_after_s=2.0, error_threshold=3, target=0.95)
    assert robot_health(math.inf, 0, 0, math.nan, limits=limits).message == "never heard from"
    stale = robot_health(5.0, 40, 10, 0.2, limits=limits)
    assert stale.level is Level.STALE and stale.message == "silent for 5.0 s"
    error = robot_health(0.1, 40, 3, 0.5, last_error="state: contains NaN", limits=limits)
    assert error.level is Level.ERROR
    assert error.message == "3 of 40 requests failed: state: contains NaN"
    warn = robot_health(0.1, 40, 2, 0.9, limits=limits)
    assert warn.level is Level.WARN and warn.message == "attainment 90.0% below 95%"
    assert robot_health(0.1, 40, 0, 0.99, limits=limits).level is Level.OK
    idle = robot_health(0.1, 0, 0, math.nan, limits=limits)
    assert idle.level is Level.OK and idle.message == "no requests in the window"
