"""fleet.launch.py: the same nodes as the shared plan, and a real launch_testing run.

ROS 2's launch and launch_testing come from apt ROS 2 or, with the PyPI wheels, from
``make launch-kit`` (../shared/ros2-launch-kit); a plain clone without either skips.
"""

import contextlib
import importlib.util
import os
import re
import shutil
import signal
import subprocess
import threading
import time
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
    from launch.actions import RegisterEventHandler
    from launch_ros.actions import Node

    def kinds(actions: list) -> tuple[int, int]:
        return (sum(isinstance(a, Node) for a in actions),
                sum(isinstance(a, RegisterEventHandler) for a in actions))

    # Every node of the plan, and a handler that ends the launch when a server dies.
    assert kinds(opaque.execute(context)) == (len(build_fleet_plan(3)), 1) == (7, 1)
    context.launch_configurations["servers"] = "2"
    # Two servers, the fleet manager, and per robot an executor and a simulated robot.
    assert kinds(opaque.execute(context)) == (len(build_fleet_plan(3, servers=2)), 2) == (9, 2)
    context.launch_configurations["respawn"] = "true"
    assert kinds(opaque.execute(context)) == (9, 0)  # launch restarts them instead


@needs_launch
@pytest.mark.timeout(480)
@pytest.mark.parametrize(("sim", "servers", "backend"), [
    # As shipped (torch, pi0-tiny, two Action worker processes): in make test.
    ("true", 1, ""),
    # Emulated, without robot_sim, and with two servers and a manager (one emulated
    # server with robot_sim adds nothing these three do not cover).
    *(pytest.param(*case, marks=pytest.mark.slow) for case in (
        ("false", 1, "emulated"), ("true", 2, "emulated")))])
def test_launch_testing_run_serves_every_robot_and_exits_cleanly(sim: str, servers: int,
                                                                 backend: str) -> None:
    launch_test = shutil.which("launch_test")
    if launch_test is None:
        pytest.skip("the launch_test command is not on PATH")
    args = [f"sim:={sim}", f"servers:={servers}"] + ([f"backend:={backend}"] if backend else [])
    proc = subprocess.run(
        [launch_test, str(ROOT / "test" / "launch" / "fleet_launch.py"), *args],
        capture_output=True, text=True, timeout=460, env=dict(os.environ), check=False)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-6000:]
    assert "test_every_robot_gets_ok_chunks" in output
    assert "test_every_process_exits_cleanly" in output
    # Per server, the manager with several, and per robot an executor (and a robot_sim).
    nodes = servers + (servers > 1) + (4 if sim == "true" else 2)
    assert output.count("process has finished cleanly") == nodes
    assert "Traceback" not in output, output[-6000:]


# -- what a user types: ros2 launch / ros2 run, stopped as a terminal stops them ----------

needs_ros2 = pytest.mark.skipif(
    shutil.which("ros2") is None, reason="the ros2 command is not installed here: install "
    "apt ROS 2, or run make launch-kit where ../shared/ros2-launch-kit exists")


def _digest(lines: list[str]) -> str:
    """``lines`` with each run of lines alike but for their numbers folded to two."""
    out: list[str] = []
    run: list[str] = []

    def flush() -> None:
        out.append(run[0])
        if len(run) > 2:
            out.append(f"    ... {len(run) - 2} more like these ...")
        if len(run) > 1:
            out.append(run[-1])

    for line in lines:
        if run and re.sub(r"\d+", "#", line) != re.sub(r"\d+", "#", run[0]):
            flush()
            run = []
        run.append(line)
    if run:
        flush()
    return "\n".join(out)


class Console:
    """A command in its own process group, read line by line like a terminal."""

    def __init__(self, args: list[str]) -> None:
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, start_new_session=True, env=dict(os.environ))
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    @property
    def text(self) -> str:
        return "\n".join(self.lines)

    def wait_for(self, pattern: str, timeout: float, start: int = 0) -> re.Match[str]:
        """The first line from ``start`` on matching ``pattern``; fails after ``timeout``."""
        end = time.monotonic() + timeout
        regex = re.compile(pattern)
        while time.monotonic() < end:
            for line in self.lines[start:]:
                if match := regex.search(line):
                    return match
            if self.proc.poll() is not None and not self._reader.is_alive():
                break
            time.sleep(0.2)
        shown = _digest(self.lines[max(start - 20, 0):])
        pytest.fail(f"no line matching {pattern!r} within {timeout:g} s; the log from 20 "
                    f"lines before the wait on, repeats folded:\n{shown[-8000:]}")

    def ctrl_c(self, timeout: float = 40.0) -> int:
        """SIGINT to the whole process group, as a terminal's Ctrl-C; the exit status."""
        os.killpg(self.proc.pid, signal.SIGINT)
        return self.wait(timeout)

    def wait(self, timeout: float) -> int:
        try:
            status = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            pytest.fail(f"still running {timeout:g} s later:\n{self.text[-5000:]}")
        self._reader.join(5.0)
        return status

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10.0)


@pytest.fixture
def console():
    started: list[Console] = []

    def start(*args: str) -> Console:
        started.append(Console(list(args)))
        return started[-1]

    yield start
    for con in started:
        if con.proc.poll() is None:
            con.kill()


def _server_pid(con: Console, start: int = 0) -> int:
    match = con.wait_for(r"\[inference_server-\d+\]: process started with pid \[(\d+)\]",
                         30.0, start)
    return int(match.group(1))


@needs_ros2
@pytest.mark.timeout(180)
def test_a_dead_server_ends_the_launch_with_an_error_naming_it(console) -> None:
    con = console("ros2", "launch", "xinfer_ros", "fleet.launch.py", "robots:=1",
                  "backend:=emulated")
    pid = _server_pid(con)
    con.wait_for(r"\[inference_server\]: serving 1 robots", 90.0)
    os.kill(pid, signal.SIGKILL)
    status = con.wait(60.0)
    assert status != 0, con.text[-3000:]
    died = [line for line in con.lines if "inference server inference_server" in line
            and "exited with status -9" in line]
    assert len(died) == 1, con.text[-3000:]
    # The rest of the fleet was shut down with it, cleanly.
    assert con.text.count("process has finished cleanly") == 2, con.text[-3000:]


@needs_ros2
@pytest.mark.slow
@pytest.mark.timeout(240)
def test_respawn_restarts_a_dead_server_and_the_robot_is_served_again(console) -> None:
    con = console("ros2", "launch", "xinfer_ros", "fleet.launch.py", "robots:=1",
                  "backend:=emulated", "respawn:=true", "respawn_delay_s:=1.0")
    pid = _server_pid(con)
    con.wait_for(r"\[inference_server\]: serving 1 robots", 90.0)
    mark = len(con.lines)
    os.kill(pid, signal.SIGKILL)
    assert _server_pid(con, mark) != pid
    con.wait_for(r"\[inference_server\]: serving 1 robots", 90.0, mark)
    # The robot halted while the server was away (hold_timeout_s 1 s, the restart takes
    # longer) and commands again on the new server's chunks.
    con.wait_for(r"robot_1.rtc_executor\]: chunk received: commanding the robot", 60.0, mark)
    assert con.proc.poll() is None, "the launch ended although respawn was on"
    assert con.ctrl_c() == 0, con.text[-3000:]
    assert "process has died" not in con.text.split("serving 1 robots")[-1], con.text[-3000:]


#: Per node: extra ros2 run arguments, and the line that shows it runs as documented.
RUNS = {
    # Defaults: the real-size π0 with seeded random weights, said before it loads.
    "inference_server": ([], r"no model_path, so seeded RANDOM weights"),
    # The shipped configuration (torch, pi0-tiny, two Action worker processes).
    "inference_server+fleet.yaml": (["--ros-args", "--params-file", "CONFIG"],
                                    r"serving 3 robots .* with model pi0-tiny on torch"),
    "rtc_executor": ([], r"request 1 unanswered after"),
    "robot_sim": ([], r"simulated robot 1 of 1"),
    "fleet_manager": ([], r"NO SERVER for \['robot_1'\]"),
}


@needs_ros2
@pytest.mark.slow
@pytest.mark.timeout(200)
@pytest.mark.parametrize("case", sorted(RUNS))
def test_ros2_run_starts_each_node_and_ctrl_c_stops_it_cleanly(console, case: str) -> None:
    node = case.split("+", maxsplit=1)[0]
    extra, expected = RUNS[case]
    extra = [str(ROOT / "config" / "fleet.yaml") if a == "CONFIG" else a for a in extra]
    con = console("ros2", "run", "xinfer_ros", node, *extra)
    con.wait_for(expected, 150.0)
    assert con.ctrl_c() == 0, con.text[-5000:]
    assert "Traceback" not in con.text, con.text[-5000:]


@needs_ros2
@pytest.mark.slow
@pytest.mark.timeout(60)
def test_ros2_run_recorder_without_output_says_what_is_missing(console) -> None:
    con = console("ros2", "run", "xinfer_ros", "recorder")
    assert con.wait(40.0) != 0
    assert "parameter 'output': required" in con.text, con.text
