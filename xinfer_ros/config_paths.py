"""Where the shipped configuration lives (ROS-free, no ament import).

In a source checkout (and ``pip install -e .``) it is ``<repo>/config``; in a colcon
install (with or without ``--symlink-install``) the package sits in
``<prefix>/lib/pythonX.Y/site-packages/xinfer_ros`` and CMake installs the
configuration to ``<prefix>/share/xinfer_ros/config``. ``XINFER_CONFIG_DIR`` overrides
both.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["config_dir", "config_file", "msg_dir"]

_PACKAGE = Path(__file__).resolve().parent
_SOURCE_ROOT = _PACKAGE.parent


def _shared(name: str) -> Path:
    source = _SOURCE_ROOT / name
    if source.is_dir():
        return source
    # <prefix>/lib/pythonX.Y/site-packages/xinfer_ros -> <prefix>/share/xinfer_ros/<name>
    if len(_PACKAGE.parents) > 3:
        installed = _PACKAGE.parents[3] / "share" / "xinfer_ros" / name
        if installed.is_dir():
            return installed
    return source


def config_dir() -> Path:
    """The configuration directory: presets, rate tables, traces, fleet.yaml."""
    override = os.environ.get("XINFER_CONFIG_DIR")
    return Path(override) if override else _shared("config")


def msg_dir() -> Path:
    """The interface definitions (``msg/*.msg``; rosidl installs them to share/)."""
    return _shared("msg")


def config_file(name: str) -> str:
    """A path as given, or a bare file name looked up in :func:`config_dir`."""
    path = Path(name)
    if path.is_file() or path.is_absolute() or len(path.parts) > 1:
        return str(path)
    return str(config_dir() / name)
