"""Robot presence judged over the time the server itself ran.

The server drops a robot silent for ``robot_timeout_s``: its live requests are
cancelled and its buffered frames freed. Silence is measured on the monotonic clock,
which keeps running while the server does not (a stop signal, a debugger, the host
swapping, a garbage-collection pause): a server that resumes after a 3 s stall would
otherwise find every robot silent and drop them all, although their messages sat in
the transport's queues the whole time. Then the first requests after the stall
arrive before any camera frame has been delivered again and are refused with "no
camera frame received yet". :class:`OwnPauses` measures the server's own pauses from
the gaps between its periodic presence checks, so that a pause is not counted as the
robots' silence.

A camera can also fall silent on its own while its robot's requests and joint states
keep arriving: after a stall, a transport's reader at times delivers no frame of a
topic again (seen with Fast DDS over UDP and shared memory alike, with best-effort
image topics). :func:`silent_cameras` names such cameras so that the server can try
a fresh subscription (which does not cure a topic that Fast DDS shared memory stopped
delivering: docs/BENCHMARKS.md, section 6.3).
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["OwnPauses", "silent_cameras"]


class OwnPauses:
    """The time a periodic check came late: the server's own pause, not the robots'.

    Args:
        period_s: The period the check is scheduled at.
        slack_s: Lateness accepted as ordinary scheduling jitter (a busy executor on a
            loaded machine); only lateness beyond it counts as a pause. At least one
            period.
    """

    def __init__(self, period_s: float, slack_s: float) -> None:
        if period_s <= 0.0 or slack_s < period_s:
            raise ValueError(f"period_s={period_s} must be > 0 and slack_s={slack_s} at "
                             "least one period")
        self._slack_s = slack_s
        self._last: float | None = None

    def tick(self, now: float) -> float:
        """Seconds of pause since the previous tick (0.0 when the check ran on time).

        Args:
            now: Monotonic time of this check.
        """
        last, self._last = self._last, now
        if last is None:
            return 0.0
        return max(0.0, now - last - self._slack_s)


def silent_cameras(frame_seen: Sequence[float], robot_seen: float, now: float,
                   after_s: float) -> list[int]:
    """Cameras without a frame for ``after_s`` while their robot was heard recently.

    Args:
        frame_seen: Per camera, the monotonic arrival of its latest frame (or of the
            subscription, before any frame).
        robot_seen: Monotonic arrival of the robot's latest message of any kind.
        now: Monotonic time now.
        after_s: Silence that counts (0: never).

    Returns:
        The silent cameras' indices; empty when the whole robot is silent (the
        presence check handles that) or ``after_s`` is 0.
    """
    if after_s <= 0.0 or now - robot_seen > after_s:
        return []
    return [cam for cam, seen in enumerate(frame_seen) if now - seen > after_s]
