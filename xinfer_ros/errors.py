"""The root of every exception xinfer_ros raises; the observation error front ends share.

Each package family has its own root under :class:`XInferRosError` (``core``:
``XInferError``, ``model``: ``ModelError``, ``bags``: ``BagError``, ``openpi``:
``OpenPIError``, ...), which also derives from the built-in class callers caught
before (``ValueError`` for bad input, ``RuntimeError`` for a failed operation), so a
caller can catch one family, every xinfer_ros error, or the built-in class.
"""

from __future__ import annotations

__all__ = ["ObservationError", "XInferRosError"]


class XInferRosError(Exception):
    """Root of every exception xinfer_ros raises."""


class ObservationError(XInferRosError, ValueError):
    """No usable observation for a request: missing, malformed, too old or in the future."""
