#!/usr/bin/env python3
"""Does the server's memory stay flat over a long run? A bounded soak on loopback.

Runs ``xinfer-fleet`` (emulated backend, ``--robots`` robots, ``--duration`` s) with the
server's openpi endpoint on a free loopback port, and beside it an openpi client that
reconnects every ``--reconnect-every`` observations. Samples the server's RSS once a
second and prints the series, then the least-squares slope over the last
``--tail`` seconds (MiB/min) and the tail's range.

    ./env.sh python scripts/soak_memory.py --robots 4 --duration 120

``--trace`` also has the server report what grows (tracemalloc and live objects by
type, every ``--trace-every`` s; see ``scripts/soak_trace/sitecustomize.py``) into
``<out>/trace.txt``; tracing slows the server, so measure the slope without it.
``--malloc`` (no tracer) has the server write what glibc's malloc holds in use once a
second, and prints its slope over the same tail beside RSS's: growth in use is held
memory; RSS growth beside flat use is freed memory the allocator keeps.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import yaml

__all__ = ["RSS_PARTS", "main", "rss_mib", "rss_parts_mib", "slope_mib_per_min"]

_SERVER_MODULE = "xinfer_ros.nodes.inference_server"
#: Seconds at the end of the series spent shutting the fleet down (RSS falls there).
_SHUTDOWN_S = 5.0

#: What RSS is made of (``/proc/<pid>/status``): the process's own memory (malloc's
#: heap, Python's arenas, thread stacks), mapped files, and shared memory it has
#: touched (Fast DDS's shared-memory transport maps the publishers' segments).
RSS_PARTS = ("RssAnon", "RssFile", "RssShmem")


def rss_mib(pid: int) -> float | None:
    """Resident memory of ``pid`` (MiB), or None once it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def rss_parts_mib(pid: int) -> dict[str, float]:
    """The :data:`RSS_PARTS` of ``pid`` (MiB); empty once it is gone."""
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return {}
    fields = (line.split() for line in lines)
    return {f[0].rstrip(":"): int(f[1]) / 1024 for f in fields
            if f and f[0].rstrip(":") in RSS_PARTS}


def slope_mib_per_min(times_s: Sequence[float], rss: Sequence[float]) -> float:
    """Least-squares slope of ``rss`` against ``times_s``, in MiB per minute."""
    return float(np.polyfit(np.asarray(times_s), np.asarray(rss), 1)[0]) * 60.0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _server_pid(parent: int, timeout_s: float) -> int | None:
    """The inference server that ``parent`` (the fleet process) started."""
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                stat = (entry / "stat").read_text()
                cmdline = (entry / "cmdline").read_bytes().decode(errors="replace")
            except OSError:
                continue
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            if ppid == parent and _SERVER_MODULE in cmdline:
                return int(entry.name)
        time.sleep(0.5)
    return None


def _config(port: int, directory: Path) -> Path:
    """The shipped fleet configuration with the server's openpi endpoint on ``port``."""
    from xinfer_ros.fleet.plan import default_config

    data = yaml.safe_load(default_config().read_text())
    params = data["inference_server"]["ros__parameters"]
    params.update({"openpi_port": port, "openpi_host": "127.0.0.1", "openpi_layout": "libero"})
    path = directory / "soak_fleet.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _fleet_env(args: argparse.Namespace, out: Path) -> dict[str, str]:
    """The fleet's environment; with ``--trace`` the server's tracing shim on its path."""
    env = dict(os.environ)
    if args.trace or args.malloc:
        shim = Path(__file__).resolve().parent / "soak_trace"
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(shim), env.get("PYTHONPATH")]))
    if args.malloc:
        env["XINFER_SOAK_MALLOC"] = str((out / "malloc.txt").resolve())
    if args.trace:
        env.update({"XINFER_SOAK_TRACE": str(out.resolve()),
                    "XINFER_SOAK_TRACE_EVERY": str(args.trace_every),
                    "XINFER_SOAK_TRACE_DELAY": str(args.trace_delay),
                    "XINFER_SOAK_TRACE_TRIM": "1" if args.trace_trim else "0"})
    return env


class _Reconnecting(threading.Thread):
    """An openpi client that opens a new connection every ``every`` observations."""

    def __init__(self, uri: str, every: int, stop: threading.Event) -> None:
        super().__init__(daemon=True)
        self.uri, self.every, self.stop = uri, every, stop
        self.connections = self.replies = self.errors = 0
        self.last_error = ""

    def run(self) -> None:
        from xinfer_ros.openpi.client import OpenPIClient

        obs = {"observation/image": np.zeros((224, 224, 3), np.uint8),
               "observation/wrist_image": np.zeros((224, 224, 3), np.uint8),
               "observation/state": np.zeros(8), "prompt": "stack the blocks",
               "xinfer/budget_ms": 2000.0}
        while not self.stop.is_set():
            try:
                with OpenPIClient(self.uri, timeout_s=10.0) as client:
                    self.connections += 1
                    for _ in range(self.every):
                        if self.stop.is_set():
                            return
                        client.infer(obs)
                        self.replies += 1
                        time.sleep(0.05)
            except Exception as exc:  # a refusal is reported, and the client reconnects
                self.errors += 1
                self.last_error = repr(exc)[:200]
                self.stop.wait(1.0)


def _print_malloc(path: Path, start: float, end: float) -> None:
    """Slopes of the server's malloc samples between the wall times ``start``..``end``."""
    try:
        rows = np.loadtxt(path, ndmin=2)
    except (OSError, ValueError) as exc:
        print(f"malloc samples: none read from {path} ({exc})")
        return
    tail = rows[(rows[:, 0] >= start) & (rows[:, 0] <= end)]
    if len(tail) < 10:
        print(f"malloc samples: {len(tail)} in the tail, too few")
        return
    t = tail[:, 0]
    print(f"server malloc, same window: in use {tail[0, 2]:.1f} -> {tail[-1, 2]:.1f} MiB, "
          f"slope {slope_mib_per_min(t, tail[:, 2]):+.2f} MiB/min; mapped slope "
          f"{slope_mib_per_min(t, tail[:, 3]):+.2f} MiB/min; Python blocks "
          f"{int(tail[0, 4])} -> {int(tail[-1, 4])} "
          f"(slope {slope_mib_per_min(t, tail[:, 4]):+.0f}/min); RSS slope in its "
          f"samples {slope_mib_per_min(t, tail[:, 1]):+.2f} MiB/min")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--robots", type=int, default=4)
    p.add_argument("--duration", type=float, default=120.0, help="fleet run (s)")
    p.add_argument("--tail", type=float, default=60.0, help="slope over the last S seconds")
    p.add_argument("--reconnect-every", type=int, default=20,
                   help="openpi observations per connection")
    p.add_argument("--no-client", action="store_true",
                   help="no openpi client (to tell its share of any growth)")
    p.add_argument("--out", type=Path, default=None, help="fleet logs (default: a temp dir)")
    p.add_argument("--trace", action="store_true",
                   help="the server reports its growing allocations to <out>/trace.txt")
    p.add_argument("--trace-every", type=float, default=15.0, help="seconds between reports")
    p.add_argument("--trace-delay", type=float, default=45.0,
                   help="seconds after the server's start before tracing starts "
                        "(start-up is slow when traced)")
    p.add_argument("--malloc", action="store_true",
                   help="the server samples malloc's bytes in use once a second "
                        "(<out>/malloc.txt; no tracer) and their slope is printed")
    p.add_argument("--trace-trim", action="store_true",
                   help="each report also calls malloc_trim(0) and gives RSS before and after")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Run the soak; 0 when it ran to its end, 1 when the server could not be watched."""
    args = _parser().parse_args(argv)
    out = args.out or Path(tempfile.mkdtemp(prefix="soak_"))
    out.mkdir(parents=True, exist_ok=True)
    port = _free_port()
    cmd = [sys.executable, "-m", "xinfer_ros.cli.fleet", "--backend", "emulated",
           "--robots", str(args.robots), "--duration", str(args.duration), "--no-progress",
           "--config", str(_config(port, out)), "--out", str(out / "fleet")]
    print("$ " + " ".join(cmd), flush=True)
    fleet = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             env=_fleet_env(args, out))
    stop = threading.Event()
    try:
        pid = _server_pid(fleet.pid, timeout_s=120.0)
        if pid is None:
            print("error: no inference server process appeared", file=sys.stderr)
            return 1
        client = _Reconnecting(f"ws://127.0.0.1:{port}", args.reconnect_every, stop)
        if not args.no_client:
            client.start()
        t0 = time.monotonic()
        wall0 = time.time() - (time.monotonic() - t0)
        series: list[tuple[float, float]] = []
        parts: list[dict[str, float]] = []
        while (rss := rss_mib(pid)) is not None and fleet.poll() is None:
            series.append((time.monotonic() - t0, rss))
            parts.append(rss_parts_mib(pid))
            detail = "  ".join(f"{k[3:].lower()}={v:.1f}" for k, v in parts[-1].items())
            print(f"t={series[-1][0]:6.1f} s  rss={rss:7.1f} MiB  ({detail})", flush=True)
            time.sleep(1.0)
        stop.set()
        if client.is_alive():
            client.join(timeout=15.0)
    finally:
        stop.set()
        output, _ = fleet.communicate(timeout=120)
    print(output[-2500:])
    if len(series) < 10:
        print("error: too few RSS samples", file=sys.stderr)
        return 1
    end = series[-1][0]
    # The fleet's last seconds (its robots stopping, its report) are left out of the tail.
    kept = [i for i, (t, _) in enumerate(series)
            if end - args.tail - _SHUTDOWN_S <= t <= end - _SHUTDOWN_S]
    times, rss_values = zip(*(series[i] for i in kept), strict=True)
    if not args.no_client:
        print(f"openpi client: {client.connections} connections, {client.replies} replies, "
              f"{client.errors} errors (refused until the endpoint is up) {client.last_error}")
    print(f"server RSS: start {series[0][1]:.1f} MiB, max {max(r for _, r in series):.1f} MiB, "
          f"end {series[-1][1]:.1f} MiB")
    print(f"last {times[-1] - times[0]:.0f} s: slope {slope_mib_per_min(times, rss_values):+.2f} "
          f"MiB/min, range {min(rss_values):.1f}-{max(rss_values):.1f} MiB")
    print("  of which " + ", ".join(
        f"{name} {slope_mib_per_min(times, [parts[i].get(name, 0.0) for i in kept]):+.2f}"
        for name in RSS_PARTS) + " MiB/min")
    if args.malloc:
        _print_malloc(out / "malloc.txt", wall0 + times[0], wall0 + times[-1])
    if args.trace:
        print(f"server allocation reports: {out / 'trace.txt'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
