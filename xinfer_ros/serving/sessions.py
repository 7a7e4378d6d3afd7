"""One requester per robot: a second sender's requests do not take a robot's service.

A newer request of a robot supersedes the one the server is still working on, so a
second publisher on ``<robot>/policy_request`` would take the robot's service away.
rclpy's events executor cannot hand a callback the publisher of a message, so the
server tells senders apart by what the requests carry: the executor puts a random
session id in ``header.frame_id`` (one per process) and stamps every request with its
send time. Per robot the server keeps the *live session*: the id of the requests it
accepts, while they keep arriving (at most ``expiry_s`` apart). A request of another
session, or one whose stamp repeats or precedes the session's latest (a replayed
message), is answered REJECTED and supersedes nothing. The stamp, not ``seq``, orders a
session: a bag player probes the server with high seq numbers before it replays a
recording's own seq numbers (the model's seeds) from 1, on stamps that only increase.
A session that fell silent for ``expiry_s`` (an executor restarted with a new id)
gives way to the next request's.

This is not authentication (SROS2 is): a forger that reads the robot's requests can
copy the session id and stamp ahead of the robot. It keeps a misconfigured second
executor, a replayed bag or a blind forger from taking a robot's service.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["RequestSessions"]


@dataclass(slots=True)
class _Session:
    token: str
    stamp_ns: int  # header stamp of its latest accepted request
    arrival: float


class RequestSessions:
    """The live session of each robot's requests (thread-confined to the request callbacks).

    Args:
        expiry_s: A session whose accepted requests stopped this long ago gives way.
    """

    def __init__(self, expiry_s: float) -> None:
        self.expiry_s = expiry_s
        self._live: dict[str, _Session] = {}
        #: Requests refused per robot since the start.
        self.refused: dict[str, int] = {}

    def admit(self, robot: str, token: str, stamp_ns: int, now: float) -> str:
        """Check one request of ``robot``; return why it is refused (empty: admitted).

        Args:
            robot: The robot the request arrived for.
            token: Its session id (``header.frame_id``; empty for a sender without one).
            stamp_ns: Its header stamp (ns): the sender's send time.
            now: Its arrival (monotonic s).
        """
        live = self._live.get(robot)
        if live is None or now - live.arrival > self.expiry_s:
            self._live[robot] = _Session(token, stamp_ns, now)
            return ""
        if token != live.token:
            why = (f"request of session {token or '<none>'!r} while robot {robot}'s session "
                   f"{live.token or '<none>'!r} is live: a second requester on its "
                   "policy_request; not served")
        elif stamp_ns <= live.stamp_ns:
            why = (f"stamp {stamp_ns / 1e9:.6f} s repeats or precedes "
                   f"{live.stamp_ns / 1e9:.6f} s of robot {robot}'s live session: a "
                   "replayed or forged request; not served")
        else:
            live.stamp_ns, live.arrival = stamp_ns, now
            return ""
        self.refused[robot] = self.refused.get(robot, 0) + 1
        return why

    def forget(self, robot: str) -> None:
        """Drop ``robot``'s session (it went silent): the next request starts one."""
        self._live.pop(robot, None)
