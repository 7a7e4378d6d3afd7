"""The ROS-free library installs with plain pip, without ROS and without torch."""

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = [pytest.mark.slow, pytest.mark.extended]


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
                   "xinfer-record", "xinfer-replay", "xinfer-serve",
                   "xinfer-check-checkpoint"):
        assert (venv / "bin" / script).exists(), script
    run = subprocess.run([str(venv / "bin" / "xinfer-sim"), "run", "--policy", "xinfer",
                          "--workload", "phases", "--robots", "2", "--rounds", "1"],
                         check=True, capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert "attainment" in run.stdout


def _plain_env(install: Path) -> dict[str, str]:
    """The environment of a user who sourced only the plain install (no source tree)."""
    keep = {k: v for k, v in os.environ.items()
            if k not in ("PYTHONPATH", "AMENT_PREFIX_PATH", "CMAKE_PREFIX_PATH", "XINFER_ROOT")}
    venv = Path(sys.executable).parents[1]
    script = (f"export AMENT_PREFIX_PATH={venv} CMAKE_PREFIX_PATH={venv}; "
              f"source {install}/setup.bash; env -0")
    out = subprocess.run(["bash", "-c", script], env=keep, capture_output=True, check=True)
    return dict(line.split("=", 1) for line in out.stdout.decode().split("\0") if "=" in line)


@pytest.mark.timeout(900)
def test_plain_colcon_install_serves_a_request_and_colcon_test_runs(tmp_path) -> None:
    """``colcon build`` without --symlink-install: presets, configs and tables from share/."""
    pytest.importorskip("rclpy")
    venv = Path(sys.executable).parents[1]
    build_env = {**os.environ, "AMENT_PREFIX_PATH": str(venv), "CMAKE_PREFIX_PATH": str(venv)}
    bases = ["--base-paths", str(ROOT), "--build-base", str(tmp_path / "build"),
             "--install-base", str(tmp_path / "install"), "--event-handlers",
             "console_cohesion-", "status-"]
    subprocess.run(["colcon", "--log-base", str(tmp_path / "log"), "build", *bases,
                    "--cmake-args", f"-DPython3_EXECUTABLE={sys.executable}",
                    "-DBUILD_TESTING=ON"], env=build_env, check=True, cwd=tmp_path,
                   capture_output=True, timeout=600)
    install = tmp_path / "install"
    env = _plain_env(install)
    probe = subprocess.run(
        [sys.executable, "-c", "import xinfer_ros.config_paths as p; print(p.__file__); "
         "print(p.config_dir())"], env=env, cwd=tmp_path, capture_output=True, text=True,
        check=True).stdout.split()
    assert probe[0].startswith(str(install)) and probe[1].startswith(str(install))
    _check_colcon_test(tmp_path, bases, env)
    _check_installed_server(install, env, tmp_path)


def _check_colcon_test(tmp_path: Path, bases: list[str], env: dict[str, str]) -> None:
    """colcon test runs the Python tests against this install (three small suites: quick)."""
    subprocess.run(["colcon", "--log-base", str(tmp_path / "log"), "test", *bases,
                    "--ctest-args", "-R", "pytest_(rtc|serving|fleet)"], env=env, cwd=tmp_path,
                   capture_output=True, check=True, timeout=300)
    result = subprocess.run(["colcon", "test-result", "--test-result-base",
                             str(tmp_path / "build" / "xinfer_ros")], check=False, env=env,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and " 0 failures" in result.stdout, result.stdout
    ran = re.search(r"Summary: (\d+) tests", result.stdout)
    assert ran is not None and int(ran.group(1)) >= 30, result.stdout  # the suites did run


def _check_installed_server(install: Path, env: dict[str, str], tmp_path: Path) -> None:
    """The installed server executable serves pi0-tiny with configs found under share/."""
    import rclpy
    from xinfer_ros.msg import ActionChunk

    params = tmp_path / "server.yaml"
    params.write_text(
        "/**:\n  ros__parameters:\n    robots: [plain]\n    model: pi0-tiny\n"
        "    backend: torch\n    torch:\n      rate_table: rate_table_cpu_pi0_tiny.json\n")
    server = subprocess.Popen(
        [str(install / "xinfer_ros" / "lib" / "xinfer_ros" / "inference_server"),
         "--ros-args", "--params-file", str(params)], env=env, cwd=tmp_path,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    rclpy.init()
    node = rclpy.create_node("plain_install_robot")
    chunks: list[ActionChunk] = []
    node.create_subscription(ActionChunk, "/plain/action_chunk", chunks.append, 10)
    try:
        _request_until_ok(node, chunks, timeout=120.0)
        ok = [c for c in chunks if c.status == ActionChunk.STATUS_OK]
        assert ok, [c.reason for c in chunks][-3:]
        assert (ok[0].horizon, ok[0].action_dim) == (50, 14)
    finally:
        node.destroy_node()
        rclpy.shutdown()
        server.send_signal(signal.SIGINT)
        output = server.communicate(timeout=30)[0]
    assert server.returncode == 0, output
    assert "serving 1 robots ['plain'] with model pi0-tiny on torch backend" in output


def _request_until_ok(node, chunks: list, timeout: float) -> None:
    """As robot "plain": stream observations and send requests until a chunk is OK."""
    import numpy as np
    import rclpy
    from rclpy.qos import qos_profile_sensor_data
    from sensor_msgs.msg import Image, JointState
    from std_msgs.msg import Header
    from xinfer_ros.msg import ActionChunk, PolicyRequest

    from xinfer_ros.serving.image_conversion import rgb_to_image_fields

    cams = [node.create_publisher(Image, f"/plain/camera_{i}/image_raw",
                                  qos_profile_sensor_data) for i in range(3)]
    joints = node.create_publisher(JointState, "/plain/joint_states", qos_profile_sensor_data)
    requests = node.create_publisher(PolicyRequest, "/plain/policy_request", 10)
    frame = rgb_to_image_fields(np.full((224, 320, 3), 60, np.uint8))
    end, seq = time.monotonic() + timeout, 0
    while time.monotonic() < end and not any(c.status == ActionChunk.STATUS_OK
                                             for c in chunks):
        stamp = node.get_clock().now().to_msg()
        for pub in cams:
            pub.publish(Image(**frame, header=Header(stamp=stamp)))
        joints.publish(JointState(position=[0.0] * 14, header=Header(stamp=stamp)))
        seq += 1
        request = PolicyRequest(robot_id="plain", seq=seq, budget_ms=5000.0,
                                instruction="pick", header=Header(stamp=stamp))
        requests.publish(request)
        for _ in range(5):
            rclpy.spin_once(node, timeout_sec=0.1)
