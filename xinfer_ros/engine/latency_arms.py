"""Shared pieces of the transport benchmarks (ROS, openpi): the in-process arm.

Every transport benchmark compares a path against the same emulated engine called in
process, with closed-loop robots (Eq. 1) and one budget, so the difference is what
the path adds. The loop, the in-process arm and the summary live here once.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import numpy as np

from xinfer_ros.core.constants import SEND_PERIOD
from xinfer_ros.core.timing import MS_PER_S, next_send

__all__ = ["BUDGET_MS", "REPLY_TIMEOUT_S", "in_process_latencies", "percentiles",
           "run_blocking_robots"]

#: One wide budget for every arm, so the scheduler never sheds and never reorders.
BUDGET_MS = 400.0
#: Longest wait for one reply before a benchmark robot gives up on it (s).
REPLY_TIMEOUT_S = 10.0


def percentiles(lat_s: list[float]) -> dict[str, float]:
    """Sample count, P50 and P99 in ms of latencies given in seconds."""
    arr = np.asarray(lat_s) * 1e3
    if arr.size == 0:
        return {"n": 0, "p50_ms": float("nan"), "p99_ms": float("nan")}
    return {"n": int(arr.size), "p50_ms": float(np.percentile(arr, 50)),
            "p99_ms": float(np.percentile(arr, 99))}


def run_blocking_robots(robots: int, duration: float, warmup: float,
                    request: Callable[[int], float | None]) -> tuple[list[float], list[float]]:
    """Run ``robots`` Eq. 1 loops of ``request(index)`` after a staggered start.

    ``request`` blocks until the reply and returns the engine's own latency of the
    request in ms when it knows it, else None.

    Returns:
        Latencies after warm-up (s), and round trip minus engine latency (s) for the
        requests whose engine latency is known.
    """
    lat: list[float] = []
    paired: list[float] = []
    lock = threading.Lock()
    stop = time.monotonic() + duration
    t_measure = time.monotonic() + warmup

    def robot(index: int) -> None:
        time.sleep(index * SEND_PERIOD / robots)
        while time.monotonic() < stop:
            sent = time.monotonic()
            engine_ms = request(index)
            done = time.monotonic()
            if sent >= t_measure:
                with lock:
                    lat.append(done - sent)
                    if engine_ms is not None:
                        paired.append(done - sent - engine_ms / 1e3)
            now = time.monotonic()
            time.sleep(next_send(sent, now) - now)

    threads = [threading.Thread(target=robot, args=(i,), daemon=True) for i in range(robots)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(duration + 30.0)
    return lat, paired


def in_process_latencies(robots: int, duration: float, warmup: float) -> list[float]:
    """Latencies of closed-loop robots calling ``StageEngine.submit`` directly."""
    from xinfer_ros.engine.backends import make_backend
    from xinfer_ros.engine.engine import StageEngine

    engine = StageEngine(make_backend("emulated"), "xinfer").start()
    inputs = engine.backend.example_inputs(0, None)
    try:
        def request(i: int) -> None:
            engine.submit(inputs, BUDGET_MS / MS_PER_S, f"r{i}").result(timeout=REPLY_TIMEOUT_S)

        return run_blocking_robots(robots, duration, warmup, request)[0]
    finally:
        engine.close()
