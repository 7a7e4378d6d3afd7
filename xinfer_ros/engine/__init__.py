"""Asynchronous stage engine, execution lanes, backends and calibration (no ROS)."""
