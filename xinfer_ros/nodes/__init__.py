"""rclpy nodes: the only layer that imports ROS."""
