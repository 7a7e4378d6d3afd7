"""How fast this host's cores ran while a benchmark measured: a probe in its own process.

On a shared VM a core's speed drifts by 10-20 % within seconds (neighbours on the
host), and at 8-12 robots on the CPU engine a few per cent of speed moves attainment
by many points: the same command run twice lands 5-20 points apart. The probe runs
two fixed work units every ``period_s`` in a separate process and times each in thread
CPU time, so that waiting for a core (the benchmark's own load) does not count, only
how fast the core ran once it had it:

- ``matmul``: small single-threaded BLAS matrix products, the kind of work the model's
  stages do. In our runs at 8 and 12 robots its median explained 58-79 % of the
  run-to-run variance of attainment (docs/BENCHMARKS.md 5.3), so it is the covariate
  :mod:`xinfer_ros.engine.speed_adjust` compares arms at by default;
- ``python``: integer arithmetic in the interpreter's loop, the kind of work the
  dispatcher does. It explained less in the same runs.

Both stay in cache and together cost about 2 ms per period, under 1 % of a core.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.synchronize import Event

import numpy as np

from xinfer_ros.core.metrics import nan_percentiles
from xinfer_ros.errors import XInferRosError

__all__ = [
    "PROBES",
    "PROBE_PERIOD_S",
    "ProbeStats",
    "SpeedProbe",
    "SpeedProbeError",
    "SpeedSummary",
    "probe_work",
]

#: Seconds between two work units: about 120 samples in a 30 s window.
PROBE_PERIOD_S = 0.25

#: The work units, in the order a sample carries them.
PROBES: tuple[str, ...] = ("matmul", "python")

#: Iterations of the interpreter's work unit (about 0.9 ms on this project's 2-core VM).
_WORK_ITERATIONS = 20_000
#: Side and count of the matrix products (about 1.1 ms on the same VM).
_MATMUL_SIDE, _MATMUL_COUNT = 96, 30

#: Environment that keeps the child's BLAS on its calling thread: thread CPU time
#: would not see work done on BLAS's own threads.
_ONE_THREAD = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


class SpeedProbeError(XInferRosError, ValueError):
    """A probe asked for with settings it cannot run with."""


def probe_work(iterations: int = _WORK_ITERATIONS) -> int:
    """The fixed work unit: integer arithmetic in the interpreter's loop."""
    total = 0
    for i in range(iterations):
        total += i * i % 7
    return total


def _probe_loop(period_s: float, stop: Event, out: Connection) -> None:
    """Child process: time the work units once per period until ``stop``; send the samples."""
    rng = np.random.default_rng(0)
    a = rng.random((_MATMUL_SIDE, _MATMUL_SIDE))
    b = rng.random((_MATMUL_SIDE, _MATMUL_SIDE))
    samples: list[tuple[float, float, float]] = []
    # A parent killed without stopping its probe (SIGKILL, SIGTERM) leaves no one to set
    # ``stop``: the child is then re-parented, and leaves instead of probing for good.
    parent = os.getppid()
    while not stop.is_set() and os.getppid() == parent:
        c0 = time.thread_time()
        for _ in range(_MATMUL_COUNT):
            a @ b
        c1 = time.thread_time()
        probe_work()
        c2 = time.thread_time()
        samples.append((time.monotonic(), (c1 - c0) * 1e3, (c2 - c1) * 1e3))
        stop.wait(period_s)
    if os.getppid() != parent:
        return  # no one reads the samples
    out.send(samples)
    out.close()


@dataclass(frozen=True)
class ProbeStats:
    """One work unit's CPU milliseconds inside the window."""

    median_ms: float
    p10_ms: float
    p90_ms: float

    @classmethod
    def of(cls, values: list[float]) -> ProbeStats:
        """Median and deciles of ``values`` (one value: all three).

        Interpolated between samples, so with few samples they stay inside the data.
        """
        median, p10, p90 = nan_percentiles(np.asarray(values), (50, 10, 90))
        return cls(median, p10, p90)


@dataclass(frozen=True)
class SpeedSummary:
    """The probe's samples inside one measurement window."""

    matmul: ProbeStats
    python: ProbeStats
    # Samples (each both work units) inside the window.
    samples: int

    def stats(self, probe: str) -> ProbeStats:
        """The statistics of work unit ``probe`` (one of :data:`PROBES`)."""
        if probe not in PROBES:
            raise SpeedProbeError(f"no work unit {probe!r}: one of {', '.join(PROBES)}")
        found: ProbeStats = getattr(self, probe)
        return found

    def to_dict(self) -> dict[str, object]:
        """The JSON form: ``samples`` and, per work unit, its median and deciles (ms)."""
        out: dict[str, object] = {"samples": self.samples}
        for name in PROBES:
            st = self.stats(name)
            out[name] = {"median_ms": st.median_ms, "p10_ms": st.p10_ms, "p90_ms": st.p90_ms}
        return out


class SpeedProbe:
    """Times the work units beside a run; a context manager.

    ``time.monotonic`` is system-wide on Linux, so the child's sample times and the
    parent's window share one clock. A child that dies leaves no samples; the run it
    probed goes on and its report carries no probe.

    Args:
        period_s: seconds between two samples.

    Raises:
        SpeedProbeError: ``period_s`` is not positive.
    """

    def __init__(self, period_s: float = PROBE_PERIOD_S) -> None:
        if not period_s > 0:
            raise SpeedProbeError(f"period_s must be > 0, got {period_s}")
        # Spawn: a forked child would inherit the engine's threads' locks.
        ctx = mp.get_context("spawn")
        self._stop = ctx.Event()
        self._recv, send = ctx.Pipe(duplex=False)
        self._proc = ctx.Process(target=_probe_loop, args=(period_s, self._stop, send),
                                 name="xinfer-speed-probe", daemon=True)
        self._send = send
        self._started = False
        self._samples: list[tuple[float, float, float]] | None = None

    def __enter__(self) -> SpeedProbe:
        self.start()
        return self

    def start(self) -> None:
        """Start the child process.

        Call it before the caller starts threads: it sets BLAS's thread count in this
        process's environment for the moment the child is spawned.
        """
        saved = {k: os.environ.get(k) for k in _ONE_THREAD}
        os.environ.update(_ONE_THREAD)  # a spawned child takes the environment at start
        try:
            self._proc.start()
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        self._send.close()  # the child holds its own end
        self._started = True

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop the child and collect its samples (idempotent; never raises for the child)."""
        if self._samples is not None:
            return
        self._samples = []
        if not self._started:
            self._send.close()
            self._recv.close()
            return
        self._stop.set()
        try:
            if self._recv.poll(timeout_s):
                self._samples = self._recv.recv()
        except (EOFError, OSError):  # the child died before it sent
            pass
        finally:
            self._recv.close()
        self._proc.join(timeout_s)
        if self._proc.is_alive():
            self._proc.kill()
            self._proc.join(timeout_s)

    def summary(self, start: float, end: float) -> SpeedSummary | None:
        """The samples taken in ``[start, end)`` (``time.monotonic`` s); None if none."""
        self.stop()
        inside = [(mm, py) for t, mm, py in self._samples or () if start <= t < end]
        if not inside:
            return None
        return SpeedSummary(matmul=ProbeStats.of([mm for mm, _ in inside]),
                            python=ProbeStats.of([py for _, py in inside]),
                            samples=len(inside))
