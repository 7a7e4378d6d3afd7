"""QoS profiles the nodes share."""

from __future__ import annotations

from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy

__all__ = ["LATCHED_QOS", "REQUEST_QOS"]

#: State rather than a stream (a budget, the fleet assignment): reliable, the latest
#: value kept for subscribers that join later (transient local, depth 1).
LATCHED_QOS = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE,
                         durability=DurabilityPolicy.TRANSIENT_LOCAL)

#: A robot's policy_request stream: only the newest request matters. Reliable, volatile,
#: keep-last 1: requests sent while a server is stalled (SIGSTOP, a long GC pause) are
#: not replayed when it resumes (each would be answered REJECTED as stale, one after the
#: other, before the current one); the server gets the newest request only.
REQUEST_QOS = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE,
                         durability=DurabilityPolicy.VOLATILE)
