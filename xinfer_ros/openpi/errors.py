"""Exceptions of the openpi endpoint, under one root, :class:`OpenPIError`."""

from __future__ import annotations

from xinfer_ros.errors import ObservationError, XInferRosError

__all__ = ["ObservationFieldError", "OpenPIError"]


class OpenPIError(XInferRosError):
    """Root of the openpi endpoint's exceptions."""


class ObservationFieldError(OpenPIError, ObservationError):
    """An observation field is missing or malformed.

    Attributes:
        field: the offending key (as the client wrote it).
    """

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
