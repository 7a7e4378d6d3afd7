"""fleet.launch.py builds the same nodes as the shared plan (needs ROS 2 launch)."""

import importlib.util
from pathlib import Path

import pytest

LAUNCH_FILE = Path(__file__).resolve().parents[2] / "launch" / "fleet.launch.py"
MISSING = [m for m in ("launch", "launch_ros", "launch_testing")
           if importlib.util.find_spec(m) is None]


@pytest.mark.skipif(bool(MISSING), reason=f"ROS 2 launch is not installed here ({MISSING});"
                    " pip wheels do not ship it, apt ROS 2 does")
def test_launch_description_matches_plan() -> None:
    from launch.actions import OpaqueFunction

    from launch import LaunchContext
    from xinfer_ros.nodes.plan import build_fleet_plan

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
