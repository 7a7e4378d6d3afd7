"""QoS profiles the nodes share."""

from __future__ import annotations

from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy

__all__ = ["LATCHED_QOS"]

#: State rather than a stream (a budget, the fleet assignment): reliable, the latest
#: value kept for subscribers that join later (transient local, depth 1).
LATCHED_QOS = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE,
                         durability=DurabilityPolicy.TRANSIENT_LOCAL)
