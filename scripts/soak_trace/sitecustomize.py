"""Memory tracing of the inference server during a soak (``soak_memory.py --trace``).

Python imports ``sitecustomize`` at start-up from the first directory on its path that
holds one; ``soak_memory.py --trace`` puts this directory first on the fleet's
``PYTHONPATH`` and names its output directory in ``XINFER_SOAK_TRACE``. In the
inference server's process only (every other process of the fleet imports this module
and returns), it starts :mod:`tracemalloc` ``XINFER_SOAK_TRACE_DELAY`` s (default 45)
after start-up (imports and warm-up are slow when traced, and only what is allocated
afterwards can be what keeps growing), keeping ``XINFER_SOAK_TRACE_FRAMES`` frames
(default 4). Then every ``XINFER_SOAK_TRACE_EVERY`` s (default 15) it appends a report
to ``trace.txt`` there:

- RSS, and the bytes tracemalloc traces (Python's allocations since tracing started);
- what glibc's malloc holds (``mallinfo2``: bytes in use by C and Python alike, against
  bytes mapped); with ``XINFER_SOAK_TRACE_TRIM=1`` also RSS before and after
  ``malloc_trim(0)``. RSS that grows while malloc's bytes in use stay flat is the
  allocator's free memory, not a leak;
- the source lines, and call stacks, whose live allocations grew most since the first
  report, and the live objects (gc) by type that grew most.

A site that grows report after report is a leak; one that grew once is warm-up.

``soak_memory.py --malloc`` asks for less: ``XINFER_SOAK_MALLOC`` names a file to which
the server appends, once a second, its wall time, RSS, malloc's bytes in use and mapped
(``mallinfo2``) and Python's allocated block count. No tracer runs, so the server's
speed and memory are its own; what malloc holds in use against RSS tells a leak
(both grow) from memory the allocator keeps after it was freed (RSS alone grows).
"""

from __future__ import annotations

import collections
import ctypes
import gc
import os
import sys
import threading
import time
import tracemalloc
from pathlib import Path

__all__: list[str] = []

_SERVER_MODULE = b"xinfer_ros.nodes.inference_server"
_TOP = 12


class _MallInfo2(ctypes.Structure):
    """glibc's ``struct mallinfo2`` (totals over every arena)."""

    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]


_LIBC = ctypes.CDLL(None)
_MALLINFO2 = getattr(_LIBC, "mallinfo2", None)
if _MALLINFO2 is not None:
    _MALLINFO2.restype = _MallInfo2
_IGNORE = [tracemalloc.Filter(False, tracemalloc.__file__),
           tracemalloc.Filter(False, "<frozen importlib._bootstrap>"),
           tracemalloc.Filter(False, "<frozen importlib._bootstrap_external>"),
           tracemalloc.Filter(False, __file__, all_frames=True)]


def _rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _malloc_line(trim: bool) -> str:
    """What malloc holds: in use (C and Python alike) against mapped; trimmed if asked."""
    if _MALLINFO2 is None:
        return "malloc: mallinfo2 not available"
    m = _MALLINFO2()
    line = (f"malloc: in use {(m.uordblks + m.hblkhd) / 2**20:.1f} MiB, mapped "
            f"{(m.arena + m.hblkhd) / 2**20:.1f} MiB (free in arenas "
            f"{m.fordblks / 2**20:.1f} MiB)")
    if trim:
        before = _rss_mib()
        _LIBC.malloc_trim(0)
        line += f"; malloc_trim(0): rss {before:.1f} -> {_rss_mib():.1f} MiB"
    return line


def _sample_malloc(path: Path, every_s: float) -> None:
    """Append ``wall_s rss_mib in_use_mib mapped_mib python_blocks`` every ``every_s``."""
    if _MALLINFO2 is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", buffering=1) as fh:
        while True:
            m = _MALLINFO2()
            fh.write(f"{time.time():.3f} {_rss_mib():.2f} "
                     f"{(m.uordblks + m.hblkhd) / 2**20:.3f} "
                     f"{(m.arena + m.hblkhd) / 2**20:.3f} {sys.getallocatedblocks()}\n")
            time.sleep(every_s)


def _grown(snap: tracemalloc.Snapshot, first: tracemalloc.Snapshot, key: str,
           frames: int) -> list[str]:
    stats = sorted((s for s in snap.compare_to(first, key) if s.size_diff > 0),
                   key=lambda s: -s.size_diff)
    lines = []
    for stat in stats[:_TOP]:
        lines.append(f"{stat.size_diff / 1024:+9.1f} KiB {stat.count_diff:+7d} blocks "
                     f"(now {stat.size / 1024:.1f} KiB)")
        lines += [f"      {f.filename}:{f.lineno}" for f in stat.traceback[:frames]]
    return lines


def _types() -> collections.Counter[str]:
    return collections.Counter(type(o).__qualname__ for o in gc.get_objects())


def _trace(out: Path, every_s: float, frames: int, delay_s: float, trim: bool) -> None:
    time.sleep(delay_s)
    tracemalloc.start(frames)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic() - delay_s
    first: tuple[tracemalloc.Snapshot, collections.Counter[str]] | None = None
    while True:
        time.sleep(every_s)
        snap = tracemalloc.take_snapshot().filter_traces(_IGNORE)
        counts = _types()
        traced, peak = tracemalloc.get_traced_memory()
        lines = [f"=== t={time.monotonic() - t0:.0f} s  rss={_rss_mib():.1f} MiB  "
                 f"traced={traced / 2**20:.1f} MiB (peak {peak / 2**20:.1f})",
                 _malloc_line(trim)]
        if first is None:
            first = snap, counts
            lines.append("(first report: later ones are diffs against it)")
        else:
            lines.append("-- source lines grown most since the first report")
            lines += _grown(snap, first[0], "lineno", 1)
            lines.append("-- call stacks grown most (innermost first)")
            lines += _grown(snap, first[0], "traceback", frames)[:4 * (frames + 1)]
            lines.append("-- live objects by type grown most since the first report")
            grown = sorted(((n - first[1].get(k, 0), k, n) for k, n in counts.items()),
                           reverse=True)[:_TOP]
            lines += [f"{d:+8d} {k} (now {n})" for d, k, n in grown if d > 0]
        with (out / "trace.txt").open("a") as fh:
            fh.write("\n".join(lines) + "\n")


def _main() -> None:
    out = os.environ.get("XINFER_SOAK_TRACE")
    samples = os.environ.get("XINFER_SOAK_MALLOC")
    if not out and not samples:
        return
    try:
        with open("/proc/self/cmdline", "rb") as fh:
            if _SERVER_MODULE not in fh.read():
                return
    except OSError:
        return
    env = os.environ.get
    if samples:
        threading.Thread(target=_sample_malloc, args=(Path(samples), 1.0),
                         name="soak-malloc", daemon=True).start()
    if not out:
        return
    args = (Path(out), float(env("XINFER_SOAK_TRACE_EVERY", "15")),
            int(env("XINFER_SOAK_TRACE_FRAMES", "4")),
            float(env("XINFER_SOAK_TRACE_DELAY", "45")), env("XINFER_SOAK_TRACE_TRIM") == "1")
    threading.Thread(target=_trace, args=args, name="soak-trace", daemon=True).start()


_main()
