"""ros2 launch xinfer_ros fleet.launch.py robots:=3 backend:=torch model:=pi0-tiny policy:=xinfer

Real robots: ``sim:=false`` starts the inference server and one RTC executor per robot
only; the robots' drivers publish the cameras and joint states. For example::

    ros2 launch xinfer_ros fleet.launch.py sim:=false robots:=arm_1,arm_2 \\
        model:=pi0 model_path:=/models/my_pi0 namespace:=cell_3

A thin adapter: the node list and parameters come from
xinfer_ros.fleet.plan.build_fleet_plan, which xinfer-fleet uses too. DDS discovery
stays on this machine unless ROS_AUTOMATIC_DISCOVERY_RANGE is set (the nodes default
it to LOCALHOST).

An inference server that dies ends the launch with a non-zero status and one line
naming it, unless ``respawn:=true``: then launch restarts it after ``respawn_delay_s``
and the executors' /diagnostics say that they wait for it.
"""

from launch.actions import DeclareLaunchArgument, OpaqueFunction, RegisterEventHandler
from launch.event_handlers import OnProcessExit
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node

from launch import LaunchDescription
from xinfer_ros.fleet.plan import build_fleet_plan

ARGUMENTS = {
    "robots": ("3", "robot count or comma-separated names"),
    "sim": ("true", "start simulated robots (false: server and executors for real robots)"),
    "namespace": ("", "prefix of every namespace: the server in /<ns>, robot r in /<ns>/r"),
    "backend": ("", "torch | emulated (default: from config)"),
    "model": ("", "model preset: pi0, pi0-tiny, tiny, ... (default: from config)"),
    "model_path": ("", "checkpoint directory of the model (default: from config)"),
    "policy": ("", "fifo | edf | slack_gate | xinfer (default: from config)"),
    "workload": ("phases", "budget pattern of the simulated robots"),
    "config": ("", "parameter file: inference_server, rtc_executor and /<robot>/rtc_executor "
                   "sections (default: share/xinfer_ros/config/fleet.yaml)"),
    "use_sim_time": ("false", "every node follows /clock"),
    "openpi_port": ("", "also serve openpi clients on this port (default: from config)"),
    "autostart": ("", "servers and executors configure and activate themselves (false: "
                      "they wait for ros2 lifecycle set <node> configure, then activate; "
                      "default: true with sim:=true, false with sim:=false)"),
    "servers": ("1", "inference servers (server_0, server_1, ...); more than one adds the "
                     "fleet_manager, which assigns the robots to them"),
    "respawn": ("false", "restart a dead inference server after respawn_delay_s (false: a "
                         "server's death ends the launch with an error naming it)"),
    "respawn_delay_s": ("2.0", "seconds before a dead inference server is restarted"),
}


class NodeDiedError(RuntimeError):
    """An inference server died while the fleet ran (launch exits non-zero, naming it)."""


def _flag(text: str, name: str) -> bool:
    if text.lower() in ("true", "1", "yes"):
        return True
    if text.lower() in ("false", "0", "no"):
        return False
    raise ValueError(f"launch argument {name}:={text!r}: expected true or false")


def _server_died(event, context):
    """Without respawn, a dead server ends the launch.

    Raising is how a launch file makes ``ros2 launch`` exit non-zero: launch logs the
    one line and shuts every node down.
    """
    if context.is_shutdown:
        return None  # stopped by the launch itself (Ctrl-C, another node's death)
    raise NodeDiedError(
        f"inference server {event.action.name} exited with status {event.returncode}; "
        "stopping the fleet (respawn:=true restarts it instead)")


def _nodes(context, *_args, **_kwargs):
    value = {name: LaunchConfiguration(name).perform(context) for name in ARGUMENTS}
    respawn = _flag(value["respawn"], "respawn")
    delay = float(value["respawn_delay_s"])
    if delay < 0.0:
        raise ValueError(f"launch argument respawn_delay_s:={delay:g}: expected >= 0")
    plan = build_fleet_plan(
        value["robots"], backend=value["backend"] or None, model=value["model"] or None,
        model_path=value["model_path"] or None, policy=value["policy"] or None,
        workload=value["workload"], config=value["config"] or None,
        sim=_flag(value["sim"], "sim"), namespace=value["namespace"],
        use_sim_time=_flag(value["use_sim_time"], "use_sim_time"),
        openpi_port=int(value["openpi_port"]) if value["openpi_port"] else None,
        servers=int(value["servers"]), server_respawn=respawn,
        autostart=_flag(value["autostart"], "autostart") if value["autostart"] else None)
    actions = []
    for spec in plan:
        server = spec.executable == "inference_server"
        node = Node(package="xinfer_ros", executable=spec.executable, name=spec.name,
                    namespace=spec.namespace, parameters=[spec.parameters], output="screen",
                    emulate_tty=True, respawn=server and respawn, respawn_delay=delay)
        actions.append(node)
        if server and not respawn:
            actions.append(RegisterEventHandler(OnProcessExit(target_action=node,
                                                              on_exit=_server_died)))
    return actions


def generate_launch_description() -> LaunchDescription:
    """Declare the arguments and build the nodes from the shared plan."""
    return LaunchDescription([
        *(DeclareLaunchArgument(name, default_value=default, description=text)
          for name, (default, text) in ARGUMENTS.items()),
        OpaqueFunction(function=_nodes),
    ])
