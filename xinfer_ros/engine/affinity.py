"""CPU affinity for the CPU backend: keep the engine's lanes and Action workers apart.

On a CPU the reference model's stages compete for cores with one another and with the
robots' threads, and the operating system decides who runs next. A unit's duration
then depends on scheduling the rate table cannot see. Pinning the main process (ViT
and Prefill lanes, dispatcher) to some CPUs and the Action worker processes to
others makes the CPU behave like separate execution resources, as CUDA streams and
an MPS process do on a GPU. Calibrate with the same pinning as the engine runs with.
Linux only (``os.sched_setaffinity``).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterable

__all__ = ["available_cpus", "cpu_list", "parse_cpus", "pin_thread"]


def available_cpus() -> frozenset[int]:
    """The CPUs this process may run on."""
    return frozenset(os.sched_getaffinity(0))


def parse_cpus(text: str) -> tuple[int, ...]:
    """Parse a CPU list such as ``"0"``, ``"1,3"`` or ``"0-2,5"``.

    Raises:
        ValueError: an empty or malformed list, a reversed range, or a CPU this
            process may not run on (the message names it).
    """
    cpus: set[int] = set()
    for raw in str(text).split(","):
        part = raw.strip()
        if not part:
            raise ValueError(f"empty entry in CPU list {text!r}")
        lo, sep, hi = part.partition("-")
        try:
            first, last = int(lo), int(hi if sep else lo)
        except ValueError:
            raise ValueError(f"CPU list {text!r}: {part!r} is not a CPU or a range") from None
        if first < 0 or last < first:
            raise ValueError(f"CPU list {text!r}: bad range {part!r}")
        cpus.update(range(first, last + 1))
    allowed = available_cpus()
    missing = sorted(cpus - allowed)
    if missing:
        raise ValueError(f"CPU list {text!r}: CPU {missing[0]} is not available "
                         f"(this process may use {sorted(allowed)})")
    return tuple(sorted(cpus))


def cpu_list(text: str) -> tuple[int, ...]:
    """Parse a CPU list for argparse (see :func:`parse_cpus`)."""
    try:
        return parse_cpus(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def pin_thread(cpus: Iterable[int] | None) -> None:
    """Restrict the calling thread, and the threads it starts later, to ``cpus``.

    ``None`` restores every CPU the process started with. Call it before the engine
    builds its lanes: threads that already exist keep their affinity.
    """
    os.sched_setaffinity(0, set(cpus) if cpus is not None else _INITIAL)


_INITIAL: frozenset[int] = available_cpus()
