"""The ROS-free library installs with plain pip, without ROS and without torch."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


@pytest.mark.timeout(600)
def test_pip_install_in_a_plain_venv(tmp_path) -> None:
    venv = tmp_path / "plain"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    py = venv / "bin" / "python"
    subprocess.run([str(py), "-m", "pip", "install", "-q", "-e", str(ROOT)], check=True,
                   cwd=tmp_path, timeout=540)
    probe = ("import importlib.util as u, xinfer_ros, xinfer_ros.core.registry, "
             "xinfer_ros.sim.workloads; "
             "print(u.find_spec('rclpy') is None, u.find_spec('torch') is None)")
    out = subprocess.run([str(py), "-c", probe], check=True, capture_output=True, text=True,
                         cwd=tmp_path).stdout.split()
    assert out == ["True", "True"]  # imported without ROS and without torch
    for script in ("xinfer-sim", "xinfer-bench", "xinfer-fleet", "xinfer-calibrate",
                   "xinfer-record", "xinfer-replay", "xinfer-serve"):
        assert (venv / "bin" / script).exists(), script
    run = subprocess.run([str(venv / "bin" / "xinfer-sim"), "run", "--policy", "xinfer",
                          "--workload", "phases", "--robots", "2", "--rounds", "1"],
                         check=True, capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert "attainment" in run.stdout
