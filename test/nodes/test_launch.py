"""fleet.launch.py: the same nodes as the shared plan, and a real launch_testing run.

ROS 2's launch and launch_testing come from apt ROS 2 or, with the PyPI wheels, from
``make launch-kit`` (../shared/ros2-launch-kit); a plain clone without either skips.
"""

import importlib.util
import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LAUNCH_FILE = ROOT / "launch" / "fleet.launch.py"
MISSING = [m for m in ("launch", "launch_ros", "launch_testing")
           if importlib.util.find_spec(m) is None]
needs_launch = pytest.mark.skipif(
    bool(MISSING), reason=f"ROS 2 launch is not installed here ({MISSING}): install apt ROS "
    "2, or run make launch-kit where ../shared/ros2-launch-kit exists")


@needs_launch
def test_launch_description_matches_plan() -> None:
    from launch.actions import OpaqueFunction

    from launch import LaunchContext
    from xinfer_ros.fleet.plan import build_fleet_plan

    spec = importlib.util.spec_from_file_location("fleet_launch", LAUNCH_FILE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    description = module.generate_launch_description()
    context = LaunchContext()
    for entity in description.entities:
        if not isinstance(entity, OpaqueFunction):
            entity.visit(context)
    opaque = next(e for e in description.entities if isinstance(e, OpaqueFunction))
    nodes = opaque.execute(context)
    plan = build_fleet_plan(3)
    assert len(nodes) == len(plan) == 7
    context.launch_configurations["servers"] = "2"
    # Two servers, the fleet manager, and per robot an executor and a simulated robot.
    assert len(opaque.execute(context)) == len(build_fleet_plan(3, servers=2)) == 9


@needs_launch
@pytest.mark.slow
@pytest.mark.timeout(420)
@pytest.mark.parametrize(("sim", "servers"), [("true", 1), ("false", 1), ("true", 2)])
def test_launch_testing_run_serves_every_robot_and_exits_cleanly(sim: str, servers: int) -> None:
    launch_test = shutil.which("launch_test")
    if launch_test is None:
        pytest.skip("the launch_test command is not on PATH")
    proc = subprocess.run(
        [launch_test, str(ROOT / "test" / "launch" / "fleet_launch.py"), f"sim:={sim}",
         f"servers:={servers}"],
        capture_output=True, text=True, timeout=400, env=dict(os.environ), check=False)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-6000:]
    assert "test_every_robot_gets_ok_chunks" in output
    assert "test_every_process_exits_cleanly" in output
    # Per server, the manager with several, and per robot an executor (and a robot_sim).
    nodes = servers + (servers > 1) + (4 if sim == "true" else 2)
    assert output.count("process has finished cleanly") == nodes
