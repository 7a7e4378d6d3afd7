"""The engine's contract for the front ends: torch-free, and met by the stage engine."""

from __future__ import annotations

import subprocess
import sys

from xinfer_ros.engine.api import Engine, RequestInputs, Status

from .helpers import make_engine


def test_the_front_ends_contract_imports_neither_torch_nor_ros() -> None:
    code = ("import sys, xinfer_ros.engine.api, xinfer_ros.serving.frontend; "
            "print(sorted({'torch', 'rclpy'} & set(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=120)
    assert out.stdout.strip() == "[]"


def test_a_front_end_serves_a_request_through_the_protocol_alone() -> None:
    stage_engine, _ = make_engine()
    engine: Engine = stage_engine
    with stage_engine:
        result = engine.submit(RequestInputs(seed=5), 0.5, "arm").result(30)
        assert engine.running and engine.backend.emulated
        assert engine.backend.action_shape == result.actions.shape  # type: ignore[union-attr]
    assert result.status is Status.OK and result.request_id >= 1
    assert not engine.running
