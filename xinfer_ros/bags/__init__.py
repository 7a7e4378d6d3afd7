"""rosbag2 files of a fleet, without ROS: topic layout, reading, scanning, reports.

Built on ``rosbags`` (pure Python; MCAP and sqlite3). The ROS side (playing a bag into
a live graph, recording one) is :mod:`xinfer_ros.nodes.bag_player` and
:mod:`xinfer_ros.nodes.recorder`.
"""
