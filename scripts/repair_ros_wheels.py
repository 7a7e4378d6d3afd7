"""Repair the CMake exports of the ROS 2 PyPI wheels inside a virtualenv.

The wheels are built in a manylinux container whose Python lives under
``/opt/python/cp311-cp311``; their CMake export files and ament parent-prefix
markers still name that directory, which does not exist here. This script rewrites
those paths to the virtualenv's own Python include directory, NumPy include
directory and prefix. It only touches files under the virtualenv and is idempotent.

Usage: ``python scripts/repair_ros_wheels.py [VENV]`` (default: ``sys.prefix``).
"""

from __future__ import annotations

import sys
import sysconfig
from pathlib import Path

import numpy as np

__all__ = ["repair_venv"]

_BUILD_PREFIX = "/opt/python/cp311-cp311"


def _replacements(venv: Path) -> list[tuple[str, str]]:
    """Return (old, new) pairs, most specific first."""
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    return [
        (
            f"{_BUILD_PREFIX}/lib/{version}/site-packages/numpy/_core/include",
            np.get_include(),
        ),
        (f"{_BUILD_PREFIX}/include/{version}", sysconfig.get_paths()["include"]),
        (_BUILD_PREFIX, str(venv)),
    ]


def repair_venv(venv: Path) -> list[Path]:
    """Rewrite the build-container paths in ``venv``'s share/ tree.

    Args:
        venv: The virtualenv prefix that holds the ROS 2 wheels.

    Returns:
        The files that were changed (empty when already repaired).
    """
    share = venv / "share"
    changed: list[Path] = []
    if not share.is_dir():
        return changed
    pairs = _replacements(venv)
    for path in share.rglob("*"):
        if not path.is_file() or path.is_symlink():
            continue
        try:
            text = path.read_text()
        except (UnicodeDecodeError, OSError):
            continue
        if _BUILD_PREFIX not in text:
            continue
        for old, new in pairs:
            text = text.replace(old, new)
        path.write_text(text)
        changed.append(path)
    return changed


if __name__ == "__main__":
    target = Path(sys.argv[1] if len(sys.argv) > 1 else sys.prefix).resolve()
    files = repair_venv(target)
    print(f"repair_ros_wheels: {len(files)} file(s) rewritten under {target}")
