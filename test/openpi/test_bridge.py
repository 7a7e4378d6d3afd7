"""The ROS node's openpi bridge, with a stand-in node (no ROS graph needed)."""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import websockets

pytest.importorskip("rcl_interfaces.msg", reason="needs the ROS 2 interfaces (./env.sh)")

from xinfer_ros.model.presets import model_io
from xinfer_ros.nodes.openpi_bridge import start_openpi_bridge
from xinfer_ros.openpi.client import OpenPIClient

pytestmark = pytest.mark.timeout(60)


class FakeNode:
    def __init__(self, engine: Any, **overrides: Any) -> None:
        self.engine = engine
        self.params = {"model": "tiny", "robots": ["robot_1"], "max_budget_ms": 10_000.0}
        self.io = model_io("tiny")
        self._overrides = overrides

    def declare_parameter(self, name: str, default: Any, descriptor: Any = None) -> Any:
        return SimpleNamespace(value=self._overrides.get(name, default))

    def get_logger(self) -> logging.Logger:
        return logging.getLogger("fake_node")


def test_bridge_is_off_by_default(engine: Any) -> None:
    assert start_openpi_bridge(FakeNode(engine)) is None


def test_bridge_serves_on_the_node_engine_and_reserves_ros_names(
        engine: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # openpi_port 0 means "off", so ask for a port and let the OS pick a free one.
    from xinfer_ros.nodes import openpi_bridge

    real = openpi_bridge.endpoint_config
    monkeypatch.setattr(openpi_bridge, "endpoint_config",
                        lambda p, port, **kw: real(p, port=0, **kw))
    bridge = start_openpi_bridge(FakeNode(engine, openpi_port=18000, openpi_layout="libero"))
    assert bridge is not None and bridge.port > 0
    try:
        with pytest.raises(websockets.InvalidStatus) as info:
            OpenPIClient(f"ws://127.0.0.1:{bridge.port}/robot_1")
        assert info.value.response.status_code == 403
        with OpenPIClient(f"ws://127.0.0.1:{bridge.port}/web_arm") as client:
            reply = client.infer({"observation/image": np.zeros((64, 64, 3), np.uint8),
                                  "observation/wrist_image": np.zeros((64, 64, 3), np.uint8),
                                  "observation/state": np.zeros(7), "prompt": "x"})
        assert reply["actions"].shape == (16, 7)
        assert engine.robots == ["web_arm"]
        assert bridge.stats()["robots"]["web_arm"]["ok"] == 1
    finally:
        bridge.close()


def test_bridge_sets_the_connection_limit_and_validates_it(
        engine: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from xinfer_ros.nodes import openpi_bridge

    with pytest.raises(ValueError, match=r"'openpi_max_connections'=0 is out of range"):
        start_openpi_bridge(FakeNode(engine, openpi_port=18000, openpi_max_connections=0))
    with pytest.raises(ValueError, match=r"'openpi_idle_timeout_s'=-1\.0 is out of range"):
        start_openpi_bridge(FakeNode(engine, openpi_port=18000, openpi_idle_timeout_s=-1.0))
    real = openpi_bridge.endpoint_config
    monkeypatch.setattr(openpi_bridge, "endpoint_config",
                        lambda p, port, **kw: real(p, port=0, **kw))
    bridge = start_openpi_bridge(FakeNode(engine, openpi_port=18000, openpi_max_connections=1,
                                          openpi_rate_limit_hz=5.0))
    assert bridge is not None
    try:
        assert bridge.server.config.rate_limit_hz == 5.0
        with OpenPIClient(f"ws://127.0.0.1:{bridge.port}/a"):
            with pytest.raises(websockets.InvalidStatus) as info:
                OpenPIClient(f"ws://127.0.0.1:{bridge.port}/b")
            assert info.value.response.status_code == 503
        assert bridge.stats()["refused"] == {"connection_limit": 1}
    finally:
        bridge.close()
