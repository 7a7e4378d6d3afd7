"""Exceptions raised while preparing a request, before any model work runs.

Every class carries ``field``: the name of the offending request field, so a server
can return it in a non-ok chunk status without parsing the message.
"""

from __future__ import annotations

__all__ = [
    "ChunkShapeError",
    "CommitLengthError",
    "ImageError",
    "InputError",
    "StateError",
]


class InputError(ValueError):
    """A request field is malformed.

    Attributes:
        field: Name of the offending field (e.g. ``"images[1]"``, ``"state"``).
    """

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


class ImageError(InputError):
    """An image has the wrong size, channel count, dtype or cannot be decoded."""


class StateError(InputError):
    """The robot state has the wrong shape or contains NaN/Inf."""


class ChunkShapeError(InputError):
    """The previous chunk is not a finite ``(H, D)`` array."""


class CommitLengthError(InputError):
    """The commit length ``d`` (or the previous-chunk shift) is out of range."""
