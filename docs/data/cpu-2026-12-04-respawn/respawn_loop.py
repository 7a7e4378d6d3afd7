"""Kill the fleet's server K times; count how often robot_1 commands again within T s.

Usage (repository root, built): python3 respawn_loop.py KILLS TIMEOUT_S STOP_S [launch args]
STOP_S > 0 sends SIGSTOP that long before each SIGKILL. Stops at the first failure.
"""

import os
import re
import signal
import subprocess
import sys
import threading
import time

KILLS, TIMEOUT_S, STOP_S = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
EXTRA = sys.argv[4:]
CHUNK = r"robot_1.rtc_executor\]: chunk received: commanding"
STARTED = r"\[inference_server-\d+\]: process started with pid \[(\d+)\]"


def main() -> None:
    """Launch, kill the server until a restart is not served, print the times."""
    env = dict(os.environ, ROS_AUTOMATIC_DISCOVERY_RANGE="LOCALHOST", ROS_DOMAIN_ID="77")
    cmd = ("source .venv/bin/activate && source build/ros2-launch-kit/local_setup.bash && "
           "source install/local_setup.bash && exec ros2 launch xinfer_ros fleet.launch.py "
           "robots:=1 backend:=emulated respawn:=true respawn_delay_s:=1.0 " + " ".join(EXTRA))
    proc = subprocess.Popen(["bash", "-c", cmd], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True,
                            env=env)
    lines: list[str] = []
    out = proc.stdout
    assert out is not None
    threading.Thread(target=lambda: lines.extend(out), daemon=True).start()

    def wait(pattern: str, timeout: float, start: int) -> re.Match[str] | None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            for line in lines[start:]:
                if match := re.search(pattern, line):
                    return match
            time.sleep(0.1)
        return None

    def server_pid(start: int) -> int:
        match = wait(STARTED, 60.0, start)
        assert match is not None, "no server started"
        return int(match.group(1))

    results: list[float | None] = []
    try:
        pid = server_pid(0)
        wait(CHUNK, 90.0, 0)
        for k in range(KILLS):
            time.sleep(2.0)
            mark, t0 = len(lines), time.monotonic()
            if STOP_S:
                os.kill(pid, signal.SIGSTOP)
                time.sleep(STOP_S)
            os.kill(pid, signal.SIGKILL)
            pid = server_pid(mark)
            ok = wait(CHUNK, TIMEOUT_S, mark) is not None
            results.append(round(time.monotonic() - t0, 1) if ok else None)
            print(k, results[-1], flush=True)
            if not ok:
                print("".join(lines[-8:]))
                break
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
    recovered = sum(r is not None for r in results)
    print("recovered", recovered, "of", len(results), results)


if __name__ == "__main__":
    main()
