"""Kill the fleet's server K times; count how often robot_1 commands again within T s.

Usage (repository root, built): python3 respawn_loop.py KILLS TIMEOUT_S STOP_S [launch args]
STOP_S > 0 sends SIGSTOP that long before each SIGKILL. Stops at the first failure.
"""
import os, re, signal, subprocess, sys, threading, time
K = int(sys.argv[1]); T = float(sys.argv[2]); STOP = float(sys.argv[3]); extra = sys.argv[4:]
env = dict(os.environ, ROS_AUTOMATIC_DISCOVERY_RANGE="LOCALHOST", ROS_DOMAIN_ID="77")
cmd = ("source .venv/bin/activate && source build/ros2-launch-kit/local_setup.bash && "
       "source install/local_setup.bash && exec ros2 launch xinfer_ros fleet.launch.py "
       "robots:=1 backend:=emulated respawn:=true respawn_delay_s:=1.0 " + " ".join(extra))
p = subprocess.Popen(["bash", "-c", cmd], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                     text=True, start_new_session=True, env=env)
lines = []
threading.Thread(target=lambda: [lines.append(l) for l in p.stdout], daemon=True).start()
def wait(pat, t, start):
    end = time.monotonic() + t
    while time.monotonic() < end:
        for i, l in enumerate(lines[start:]):
            if re.search(pat, l): return start + i, l
        time.sleep(0.1)
    return None, None
def server_pid(start):
    i, l = wait(r"inference_server-\d+\]: process started with pid \[(\d+)\]|\[INFO\] \[inference_server-\d+\]: process started with pid \[(\d+)\]", 60, start)
    return int(re.search(r"pid \[(\d+)\]", l).group(1))
ok = 0; res = []
try:
    pid = server_pid(0)
    i, _ = wait(r"robot_1.rtc_executor\]: chunk received: commanding", 90, 0)
    for k in range(K):
        time.sleep(2.0)
        mark = len(lines); t0 = time.monotonic()
        if STOP:
            os.kill(pid, signal.SIGSTOP); time.sleep(STOP)
        os.kill(pid, signal.SIGKILL)
        pid = server_pid(mark)
        i, _ = wait(r"robot_1.rtc_executor\]: chunk received: commanding", T, mark)
        dt = time.monotonic() - t0
        res.append(round(dt, 1) if i is not None else None); ok += i is not None
        print(k, res[-1], flush=True)
        if i is None:
            print("".join(lines[-8:]))
            break
finally:
    os.killpg(p.pid, signal.SIGINT)
    try: p.wait(30)
    except subprocess.TimeoutExpired: os.killpg(p.pid, signal.SIGKILL)
print("recovered", ok, "of", len(res), res)
