"""Exceptions of the openpi endpoint, under one root, :class:`OpenPIError`."""

from __future__ import annotations

from xinfer_ros.errors import ObservationError, XInferRosError

__all__ = ["LayoutSettingError", "ObservationFieldError", "OpenPIError"]


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


class LayoutSettingError(OpenPIError, ValueError):
    """A layout setting (e.g. one of its ``transforms``) is missing or not understood.

    ``str()`` is one line naming the field and what is wrong; :func:`load_layout`
    prefixes the file, and the start-up paths turn it into exit status 2.

    Attributes:
        field: the offending field (``transforms.adapt_to_pi``, ...).
    """

    def __init__(self, field: str, detail: str) -> None:
        super().__init__(f"field {field}: {detail}")
        self.field = field
