"""Engine backends: ``emulated`` (rate-table timings) and ``torch`` (reference VLA).

The torch backend is imported only when asked for, so the emulated one works in an
environment without torch.
"""

from __future__ import annotations

from typing import Any

from xinfer_ros.engine.backends.base import (
    AnyBackend,
    Backend,
    InputValidationError,
    StateFactory,
)
from xinfer_ros.engine.backends.emulated import EMULATION_NOTICE, EmulatedBackend

__all__ = [
    "BACKENDS",
    "EMULATION_NOTICE",
    "AnyBackend",
    "Backend",
    "EmulatedBackend",
    "InputValidationError",
    "StateFactory",
    "make_backend",
]

#: Backend names accepted by :func:`make_backend` and the CLIs.
BACKENDS: tuple[str, ...] = ("emulated", "torch")


def make_backend(name: str, **kwargs: Any) -> AnyBackend:
    """Build a backend by name.

    Args:
        name: ``emulated`` or ``torch``.
        **kwargs: passed to the backend's constructor.

    Raises:
        ValueError: on an unknown name.
    """
    if name == "emulated":
        return EmulatedBackend(**kwargs)
    if name == "torch":
        from xinfer_ros.engine.backends.torch_backend import TorchBackend

        return TorchBackend(**kwargs)
    raise ValueError(f"unknown backend {name!r}; choose one of {', '.join(BACKENDS)}")
