"""Discrete-event closed-loop fleet simulator and workloads (no ROS, no torch)."""
