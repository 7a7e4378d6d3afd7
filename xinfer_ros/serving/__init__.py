"""The inference server's ROS-free parts.

Observation buffers, image conversion and the release scheduler of phase spreading;
:mod:`xinfer_ros.nodes.inference_server` adapts them to ROS topics.
"""
