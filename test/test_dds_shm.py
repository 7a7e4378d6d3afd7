"""Zombie Fast DDS shared memory is removed; files a live process holds are kept."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from .dds_shm import clean_zombie_shm


def _make(directory: Path, *names: str) -> None:
    for name in names:
        (directory / name).write_bytes(b"")


def test_only_files_whose_lock_nobody_holds_are_removed(tmp_path: Path) -> None:
    _make(tmp_path, "fastdds_0a7434f930a0b7cb", "fastdds_0a7434f930a0b7cb_el",
          "fastdds_port7411", "fastdds_port7411_el", "sem.fastdds_port7411_mutex",
          "fastdds_1111222233334444", "fastdds_1111222233334444_el",
          "fastdds_port7413", "fastdds_port7413_el", "sem.fastdds_port7413_mutex",
          "fastrtps_port7415", "fastrtps_port7415_sl",
          "other_el", "fastdds_port7417")  # not Fast DDS's, or no lock companion
    # A live owner: a lock held on another open file description, as another process's.
    held = [os.open(tmp_path / n, os.O_RDWR)
            for n in ("fastdds_1111222233334444_el", "fastdds_port7413_el")]
    try:
        for fd in held:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        removed = clean_zombie_shm(tmp_path)
        left = sorted(p.name for p in tmp_path.iterdir())
    finally:
        for fd in held:
            os.close(fd)
    assert removed == sorted(["fastdds_0a7434f930a0b7cb", "fastdds_0a7434f930a0b7cb_el",
                              "fastdds_port7411", "fastdds_port7411_el",
                              "sem.fastdds_port7411_mutex",
                              "fastrtps_port7415", "fastrtps_port7415_sl"])
    assert left == sorted(["fastdds_1111222233334444", "fastdds_1111222233334444_el",
                           "fastdds_port7413", "fastdds_port7413_el",
                           "sem.fastdds_port7413_mutex", "other_el", "fastdds_port7417"])


def test_a_missing_directory_removes_nothing(tmp_path: Path) -> None:
    assert clean_zombie_shm(tmp_path / "absent") == []
