"""Remove Fast DDS shared-memory files that no live process holds.

A ROS 2 process killed before its participant closes leaves its Fast DDS segments and
ports in ``/dev/shm``. Later processes that open those ports can then hang at shutdown
(Fast-DDS issue 1144, where eProsima's advice is to remove the files): on this project's
machine about 650 such files made launch tests' nodes ignore SIGINT and SIGTERM until
they were killed. Fast DDS marks a file in use with an exclusive ``flock`` on its
``_el`` (or ``_sl``) companion for as long as the owner lives, so a companion that can
be locked belongs to a dead process; ``fastdds shm clean`` works the same way, but it
needs a package the test environment lacks.
"""

from __future__ import annotations

import fcntl
import os
import re
from pathlib import Path

__all__ = ["SHM_DIR", "clean_zombie_shm"]

#: Where Fast DDS keeps its shared memory on Linux.
SHM_DIR = Path("/dev/shm")

#: A segment's or a port's lock companion: ``fastdds_<16 hex digits>_el`` or
#: ``fastdds_port<N>_el`` (``_sl``: a port's shared lock). The ``fastrtps_`` prefix is
#: older Fast DDS releases'.
_LOCK = re.compile(r"^(?P<base>fast(?:dds|rtps)_(?:[0-9a-z]{16}|port\d{1,5}))_(?:el|sl)$")


def _held(path: Path) -> bool:
    """Whether a live process holds ``path``'s lock (a file gone counts as held)."""
    try:
        fd = os.open(path, os.O_RDWR)
    except OSError:
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)  # closing drops the lock this check took
    return False


def clean_zombie_shm(directory: Path = SHM_DIR) -> list[str]:
    """Remove the files of every Fast DDS segment and port whose lock no process holds.

    Args:
        directory: the shared-memory directory (a test passes its own).

    Returns:
        The names removed, sorted.
    """
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    removed: set[str] = set()
    for name in names:
        match = _LOCK.match(name)
        if match is None or _held(directory / name):
            continue
        base = match["base"]
        # A port's mutex is a POSIX semaphore, which glibc names sem.<name>.
        for victim in (name, base, f"sem.{base}_mutex"):
            try:
                os.remove(directory / victim)
            except OSError:
                continue
            removed.add(victim)
    return sorted(removed)
