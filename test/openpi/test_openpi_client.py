"""The REAL PyPI openpi client (own venv, numpy<2) against the endpoint."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from xinfer_ros.openpi.codec import packb, unpackb

pytestmark = pytest.mark.timeout(240)

REPO = Path(__file__).resolve().parents[2]


def test_real_client_receives_chunks_of_the_right_shape(start_server: Any,
                                                        run_openpi_clients: Any) -> None:
    server = start_server()
    [out] = run_openpi_clients({"port": server.port, "requests": 3,
                                "clients": [{"layout": "libero"}]})
    assert "fatal" not in out, out
    assert out["errors"] == []
    assert out["shapes"] == [[16, 7]] * 3 and set(out["dtypes"]) == {"<f8"}
    assert out["timing"][0] == ["infer_ms"] and out["timing"][1] == ["infer_ms", "prev_total_ms"]
    assert out["metadata"]["policy"] == "xinfer" and out["metadata"]["server"] == "xinfer_ros"


def test_four_concurrent_real_clients_share_the_xinfer_scheduler(
        start_server: Any, engine: Any, run_openpi_clients: Any) -> None:
    server = start_server()
    clients = [{"layout": "libero", "robot_id": "libero_a", "budget_ms": 90.0},
               {"layout": "libero", "robot_id": "libero_b", "budget_ms": 400.0},
               {"layout": "aloha", "robot_id": "aloha_a", "path": True},
               {"layout": "aloha", "robot_id": "aloha_b", "path": True}]
    outs = run_openpi_clients({"port": server.port, "requests": 6, "clients": clients})
    for client, out in zip(clients, outs, strict=True):
        assert "fatal" not in out, out
        assert out["errors"] == []
        width = 7 if client["layout"] == "libero" else 14
        assert out["shapes"] == [[16, width]] * 6
        assert set(out["robot_ids"]) == {client["robot_id"]}
    assert engine.policy.name == "xinfer"
    assert sorted(set(engine.robots)) == ["aloha_a", "aloha_b", "libero_a", "libero_b"]
    assert len(engine.robots) == 24
    assert {90.0, 400.0, 180.0} <= set(engine.budgets)
    assert engine.max_live >= 2          # requests of different robots were live together
    assert engine.inner.stats()["results"]["OK"] == 24


def test_malformed_observation_gets_a_clear_error_and_serving_continues(
        start_server: Any, engine: Any, run_openpi_clients: Any) -> None:
    server = start_server()
    clients = [{"layout": "libero", "robot_id": "bad", "malformed_at": 1},
               {"layout": "libero", "robot_id": "good"}]
    bad, good = run_openpi_clients({"port": server.port, "requests": 4, "clients": clients})
    assert "fatal" not in bad and "fatal" not in good
    assert len(bad["errors"]) == 1
    assert "Error in inference server" in bad["errors"][0]       # openpi client's wording
    assert "invalid_observation: observation/state" in bad["errors"][0]
    assert bad["shapes"] == [[16, 7]] * 3                  # same connection kept serving
    assert good["errors"] == [] and good["shapes"] == [[16, 7]] * 4


_INTEROP = r"""
import sys, numpy as np
from openpi_client import msgpack_numpy
data = sys.stdin.buffer.read()
obj = msgpack_numpy.unpackb(data)
assert obj["a"].dtype == np.float32 and obj["a"].shape == (2, 3), obj
assert obj["s"] == np.int64(5) and obj["t"] == "x"
out = msgpack_numpy.packb({"b": np.arange(12, dtype=np.uint8).reshape(3, 4),
                           "g": np.float64(2.5), "n": [1, None]})
sys.stdout.buffer.write(out)
"""


def test_codec_interoperates_with_openpis_msgpack_numpy(openpi_python: Path) -> None:
    msg = packb({"a": np.arange(6, dtype=np.float32).reshape(2, 3), "s": np.int64(5),
                 "t": "x"})
    proc = subprocess.run([str(openpi_python), "-c", _INTEROP], input=msg, capture_output=True,
                          timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    back = unpackb(proc.stdout)
    np.testing.assert_array_equal(back["b"], np.arange(12, dtype=np.uint8).reshape(3, 4))
    assert back["g"] == np.float64(2.5) and back["n"] == [1, None]


def test_standalone_cli_serves_the_real_client(run_openpi_clients: Any) -> None:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.Popen(
        [sys.executable, "-m", "xinfer_ros.cli.serve", "--openpi", "--port", "0",
         "--backend", "emulated", "--model", "tiny", "--policy", "xinfer",
         "--log-level", "WARNING"], stdout=subprocess.PIPE, text=True, env=env, cwd=REPO)
    try:
        deadline = time.monotonic() + 60
        line = ""
        while time.monotonic() < deadline and "ws://" not in line:
            line = proc.stdout.readline() if proc.stdout else ""
            if proc.poll() is not None:
                break
        assert "ws://127.0.0.1:" in line, f"server did not start: {line!r}"
        port = int(line.split("ws://127.0.0.1:")[1].split()[0])
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as resp:
            assert resp.status == 200 and resp.read() == b"OK\n"
        outs = run_openpi_clients({"port": port, "requests": 2, "clients": [
            {"layout": "aloha", "robot_id": "cli_robot", "path": True}]})
        assert outs[0]["shapes"] == [[16, 14]] * 2, outs
        assert outs[0]["metadata"]["robot_id"] == "cli_robot"
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
