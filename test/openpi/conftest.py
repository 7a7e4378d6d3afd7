"""Fixtures of the openpi endpoint tests: an emulated engine, a server, the real client.

The PyPI ``openpi-client`` pins ``numpy<2`` while this project runs NumPy 2, so the real
client lives in its own venv, ``<repo>/.venv-openpi`` (git-ignored), created once and
reused across sessions; its scripts run as subprocesses.
"""

from __future__ import annotations

import fcntl
import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from xinfer_ros.engine.backends import make_backend
from xinfer_ros.engine.engine import StageEngine
from xinfer_ros.openpi.layouts import ModelSpec
from xinfer_ros.openpi.server import OpenPIServer, ServerConfig, ServerThread

REPO = Path(__file__).resolve().parents[2]
OPENPI_VENV = REPO / ".venv-openpi"
OPENPI_CLIENT = "openpi-client==0.1.2"
#: openpi-client 0.1.2 imports typing_extensions without declaring it.
OPENPI_EXTRAS = ("typing-extensions>=4.7",)
CLIENT_SCRIPT = Path(__file__).with_name("openpi_client_script.py")
_OFFLINE_HINTS = ("Could not find a version", "No matching distribution", "ConnectionError",
                  "NewConnectionError", "Temporary failure in name resolution",
                  "Network is unreachable", "Max retries exceeded")


class RecordingEngine:
    """A started emulated StageEngine that records each submit's robot id and load."""

    def __init__(self, policy: str = "xinfer") -> None:
        self.inner = StageEngine(make_backend("emulated"), policy).start()
        self.lock = threading.Lock()
        self.robots: list[str] = []
        self.budgets: list[float] = []
        self.inputs: list[Any] = []
        self.max_live = 0

    def submit(self, inputs: Any, budget: float, robot_id: str, callback: Any = None) -> Any:
        fut = self.inner.submit(inputs, budget, robot_id, callback)
        with self.lock:
            self.robots.append(robot_id)
            self.budgets.append(round(budget * 1e3, 9))  # ms, as the clients sent them
            self.inputs.append(inputs)
            self.max_live = max(self.max_live, self.inner.live_count())
        return fut

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


@pytest.fixture
def engine() -> Iterator[RecordingEngine]:
    eng = RecordingEngine()
    yield eng
    eng.inner.close(drain_timeout=1.0)


@pytest.fixture
def model() -> ModelSpec:
    return ModelSpec.from_preset("tiny")


@pytest.fixture
def start_server(engine: RecordingEngine, model: ModelSpec) -> Iterator[Any]:
    """``start_server(**config) -> ServerThread`` on 127.0.0.1, any free port."""
    threads: list[ServerThread] = []

    def start(**kwargs: Any) -> ServerThread:
        cfg = ServerConfig(host="127.0.0.1", port=0, **kwargs)
        thread = ServerThread(OpenPIServer(engine, model, cfg))
        thread.start()
        threads.append(thread)
        return thread

    yield start
    for t in threads:
        t.close()


def _install_openpi_venv() -> Path:
    python = OPENPI_VENV / "bin" / "python"
    stamp = OPENPI_VENV / ".xinfer-ready"
    OPENPI_VENV.mkdir(exist_ok=True)
    with open(OPENPI_VENV / ".xinfer-lock", "w") as lock_file:
        fcntl.flock(lock_file, fcntl.LOCK_EX)  # one creator when sessions run in parallel
        wanted = " ".join((OPENPI_CLIENT, *OPENPI_EXTRAS))
        if stamp.is_file() and stamp.read_text() == wanted and python.is_file():
            return python
        subprocess.run([sys.executable, "-m", "venv", str(OPENPI_VENV)], check=True,
                       timeout=120, capture_output=True)
        proc = subprocess.run([str(python), "-m", "pip", "install", "-q",
                               "--disable-pip-version-check", OPENPI_CLIENT, *OPENPI_EXTRAS],
                              check=False, capture_output=True, text=True, timeout=300)
        if proc.returncode != 0:
            tail = (proc.stdout + proc.stderr).strip()[-1500:]
            if any(h in tail for h in _OFFLINE_HINTS):
                pytest.skip(f"PyPI unreachable, cannot install {OPENPI_CLIENT}: {tail}")
            pytest.fail(f"pip install {OPENPI_CLIENT} failed:\n{tail}")
        stamp.write_text(wanted)
    return python


@pytest.fixture(scope="session")
def openpi_python() -> Path:
    """The python of a venv holding the real PyPI openpi-client (numpy<2)."""
    return _install_openpi_venv()


@pytest.fixture
def run_openpi_clients(openpi_python: Path) -> Any:
    """``run(config) -> list[dict]``: run the real client script; one result per client."""

    def run(config: dict[str, Any], timeout: float = 60.0) -> list[dict[str, Any]]:
        proc = subprocess.run([str(openpi_python), str(CLIENT_SCRIPT), json.dumps(config)],
                              check=False, capture_output=True, text=True, timeout=timeout)
        assert proc.returncode == 0, proc.stderr[-3000:]
        return json.loads(proc.stdout.strip().splitlines()[-1])

    return run
