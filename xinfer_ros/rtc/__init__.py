"""Real-time chunking: chunk splicing, prefix masks and guidance weights (no ROS, no torch)."""
