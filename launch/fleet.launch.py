"""ros2 launch xinfer_ros fleet.launch.py robots:=3 backend:=torch model:=pi0-tiny policy:=xinfer

A thin adapter: the node list and parameters come from
xinfer_ros.nodes.plan.build_fleet_plan, which xinfer-fleet uses too.
"""

from launch.actions import DeclareLaunchArgument, OpaqueFunction
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node

from launch import LaunchDescription
from xinfer_ros.nodes.plan import build_fleet_plan

ARGUMENTS = {
    "robots": ("3", "robot count or comma-separated names"),
    "backend": ("", "torch | emulated (default: from config)"),
    "model": ("", "model preset: pi0, pi0-tiny, tiny, ... (default: from config)"),
    "model_path": ("", "checkpoint directory of the model (default: from config)"),
    "policy": ("", "fifo | edf | slack_gate | xinfer (default: from config)"),
    "workload": ("phases", "budget pattern of the simulated robots"),
    "config": ("", "server parameter file (default: share/xinfer_ros/config/fleet.yaml)"),
}


def _nodes(context, *_args, **_kwargs):
    value = {name: LaunchConfiguration(name).perform(context) for name in ARGUMENTS}
    plan = build_fleet_plan(
        value["robots"], backend=value["backend"] or None, model=value["model"] or None,
        model_path=value["model_path"] or None, policy=value["policy"] or None,
        workload=value["workload"], config=value["config"] or None)
    return [
        Node(package="xinfer_ros", executable=spec.executable, name=spec.name,
             namespace=spec.namespace, parameters=[spec.parameters], output="screen",
             emulate_tty=True)
        for spec in plan
    ]


def generate_launch_description() -> LaunchDescription:
    """Declare the arguments and build the nodes from the shared plan."""
    return LaunchDescription([
        *(DeclareLaunchArgument(name, default_value=default, description=text)
          for name, (default, text) in ARGUMENTS.items()),
        OpaqueFunction(function=_nodes),
    ])
