"""A node ends when it is destroyed or fails to build, not when the garbage collector runs.

See :mod:`xinfer_ros.nodes.lifetime`. The collector is off in these tests, so a node
kept alive by a reference cycle would still be in the ROS graph.
"""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

pytest.importorskip("rclpy")

import rclpy
from rclpy.exceptions import InvalidHandle
from rclpy.node import Node
from rclpy.parameter import Parameter

from xinfer_ros.nodes.fleet_manager import FleetManager
from xinfer_ros.nodes.inference_server import InferenceServer
from xinfer_ros.nodes.lifetime import destroyed_on_failure
from xinfer_ros.nodes.recorder import Recorder
from xinfer_ros.nodes.robot_sim import RobotSim
from xinfer_ros.nodes.rtc_executor import RtcExecutor

pytestmark = [pytest.mark.ros, pytest.mark.timeout(60)]

_SERVER = [Parameter("backend", value="emulated"), Parameter("robots", value=["r1"])]

#: (node class, parameters it builds with, a parameter that makes it raise)
BUILDS: list[tuple[type[Node], list[Parameter], Parameter]] = [
    (InferenceServer, _SERVER, Parameter("policy", value="lifo")),
    (RtcExecutor, [], Parameter("startup", value="zero_pose")),
    (RobotSim, [], Parameter("workload", value="chaos")),
    (Recorder, [Parameter("output", value="/nonexistent/bag")],
     Parameter("storage", value="rosbag1")),
    (FleetManager, [], Parameter("startup_timeout_s", value=-1.0)),
]
_IDS = [cls.__name__ for cls, _, _ in BUILDS]
NAMES = ["inference_server", "rtc_executor", "robot_sim", "recorder", "fleet_manager"]


@pytest.fixture
def observer() -> Iterator[Node]:
    """A node that reads the graph, in a fresh context, with the collector off."""
    gc.collect()
    gc.disable()
    rclpy.init()
    node = rclpy.create_node("lifetime_observer")
    try:
        yield node
    finally:
        node.destroy_node()
        rclpy.shutdown()
        gc.enable()


def _in_graph(observer: Node, name: str, present: bool, wait_s: float = 2.0) -> bool:
    """Whether ``name`` is (or, with ``present`` False, still is) in the graph."""
    until = time.monotonic() + wait_s
    while True:
        seen = name in observer.get_node_names()
        if seen == present or time.monotonic() > until:
            return seen
        time.sleep(0.02)


def _threads() -> set[int]:
    return {t.ident for t in threading.enumerate() if t.ident is not None}


@pytest.mark.parametrize(("cls", "params", "_bad"), BUILDS, ids=_IDS)
def test_a_destroyed_node_leaves_the_graph_at_once(observer: Node, cls: type[Node],
                                                    params: list[Parameter],
                                                    _bad: Parameter, tmp_path: Path) -> None:
    params = [Parameter("output", value=str(tmp_path / "bag")) if p.name == "output" else p
              for p in params]
    node = cls(parameter_overrides=params)
    name = node.get_name()
    assert _in_graph(observer, name, present=True)
    close: Callable[[], None] | None = getattr(node, "close", None)
    if close is not None:
        close()
    node.destroy_node()
    # rclpy's own LifecycleNode stays here until its Python object is collected.
    assert not _in_graph(observer, name, present=False)


@pytest.mark.parametrize(("cls", "params", "bad"), BUILDS, ids=_IDS)
def test_a_node_that_rejects_its_parameters_leaves_nothing_behind(
        observer: Node, cls: type[Node], params: list[Parameter], bad: Parameter) -> None:
    before = _threads()
    # Two in one context: left to rclpy's shutdown, one of them would outlive it.
    for _ in range(2):
        with pytest.raises(ValueError) as err:
            cls(parameter_overrides=[*[p for p in params if p.name != bad.name], bad])
        assert repr(bad.name) in str(err.value)
    assert not set(NAMES) & set(observer.get_node_names())
    assert _threads() <= before


def test_a_server_failing_after_its_engine_started_stops_the_engine(observer: Node) -> None:
    before = _threads()
    with pytest.raises(ValueError, match="openpi_port"):
        # The openpi parameters are declared last, after the engine and the phase
        # spreading thread are running.
        InferenceServer(parameter_overrides=[*_SERVER, Parameter("phase_spread", value=True),
                                             Parameter("openpi_port", value=-5)])
    assert not _in_graph(observer, "inference_server", present=False)
    assert _threads() <= before


def test_an_error_while_undoing_is_a_note_and_the_node_is_destroyed_still() -> None:
    built: list[Node] = []

    class Broken(Node):
        @destroyed_on_failure
        def __init__(self) -> None:
            super().__init__("broken")
            built.append(self)
            raise ValueError("parameter 'x' is wrong")

        def abandon(self) -> None:
            raise RuntimeError("cannot undo")

    rclpy.init()
    try:
        with pytest.raises(ValueError, match="parameter 'x'") as err:
            Broken()
        assert any("cannot undo" in note for note in err.value.__notes__)
        with pytest.raises(InvalidHandle), built[0].handle:
            pass
    finally:
        rclpy.shutdown()


def test_a_destroyed_lifecycle_node_refuses_transitions_instead_of_crashing() -> None:
    rclpy.init()
    try:
        node = RtcExecutor()
        node.destroy_node()
        with pytest.raises(AttributeError):
            node.trigger_configure()
    finally:
        rclpy.shutdown()
