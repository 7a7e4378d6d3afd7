"""What the ROS graph says about a topic's publishers (for seeing strangers)."""

from __future__ import annotations

from rclpy.node import Node

__all__ = ["publishing_nodes"]


def publishing_nodes(node: Node, topic: str) -> list[str]:
    """Fully qualified names of the nodes publishing ``topic`` ("" where unnamed)."""
    return [f"{info.node_namespace.rstrip('/')}/{info.node_name}" if info.node_name else ""
            for info in node.get_publishers_info_by_topic(topic)]
