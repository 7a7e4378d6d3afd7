"""A second ROS process for the cross-process interface tests.

Usage:
    python _peer.py publish TOPIC COUNT   publish ActionChunks until COUNT are matched
    python _peer.py serve SECONDS         serve ~/set_policy under the node name "peer"
"""

from __future__ import annotations

import sys
import time

import rclpy
from rclpy.node import Node
from xinfer_ros.msg import ActionChunk
from xinfer_ros.srv import SetPolicy


def publish(topic: str, count: int) -> int:
    """Publish a 16x14 chunk every 50 ms until a subscriber matched and COUNT went out."""
    node = Node("peer_publisher")
    pub = node.create_publisher(ActionChunk, topic, 10)
    deadline = time.monotonic() + 20.0
    sent = 0
    while sent < count and time.monotonic() < deadline:
        if pub.get_subscription_count() > 0:
            msg = ActionChunk(robot_id="robot_1", seq=sent, status=ActionChunk.STATUS_OK)
            msg.horizon, msg.action_dim = 16, 14
            msg.actions = [float(i) / 224.0 for i in range(224)]
            msg.timing.vit_ms = 4.3
            pub.publish(msg)
            sent += 1
        rclpy.spin_once(node, timeout_sec=0.05)
    node.destroy_node()
    return 0 if sent == count else 1


def serve(seconds: float) -> int:
    """Answer set_policy: accept the known policy names, refuse the rest."""
    node = Node("peer")

    def handle(request: SetPolicy.Request, response: SetPolicy.Response) -> SetPolicy.Response:
        response.success = request.policy in {"fifo", "edf", "slack_gate", "xinfer"}
        response.message = f"policy {request.policy!r} " + (
            "active" if response.success else "unknown"
        )
        return response

    node.create_service(SetPolicy, "~/set_policy", handle)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        rclpy.spin_once(node, timeout_sec=0.1)
    node.destroy_node()
    return 0


if __name__ == "__main__":
    rclpy.init()
    try:
        if sys.argv[1] == "publish":
            code = publish(sys.argv[2], int(sys.argv[3]))
        else:
            code = serve(float(sys.argv[2]))
    finally:
        rclpy.try_shutdown()
    sys.exit(code)
