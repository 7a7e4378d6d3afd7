"""The fleet's node plan (ROS-free): which node runs where with which parameters.

``launch/fleet.launch.py`` and ``xinfer-fleet`` both build their fleets from
:func:`xinfer_ros.fleet.plan.build_fleet_plan`.
"""
