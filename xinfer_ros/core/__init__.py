"""Scheduler core: request contract, predictor, policies, forecaster, metrics (no ROS, no torch)."""
