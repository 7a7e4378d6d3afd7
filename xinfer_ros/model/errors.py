"""Exceptions of the model layer, under one root, :class:`ModelError`.

:class:`InputError` and its subclasses are raised while preparing a request, before
any model work runs; each carries ``field``, the name of the offending request field,
so a server can return it in a non-ok chunk status without parsing the message.
:class:`CheckpointError` is raised at start-up when a model directory, its
configuration, tokenizer or statistics cannot be used; it names the path.
"""

from __future__ import annotations

from xinfer_ros.errors import XInferRosError

__all__ = [
    "CheckpointError",
    "ChunkShapeError",
    "CommitLengthError",
    "ImageError",
    "InputError",
    "ModelError",
    "StateError",
]


class ModelError(XInferRosError):
    """Root of the model layer's exceptions."""


class CheckpointError(ModelError, ValueError):
    """A model directory (or a file in it) cannot be served.

    Attributes:
        path: The directory or file at fault.
    """

    def __init__(self, path: object, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = str(path)


class InputError(ModelError, ValueError):
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
