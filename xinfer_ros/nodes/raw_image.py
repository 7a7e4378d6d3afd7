"""Camera frames (sensor_msgs/Image or CompressedImage) kept serialized until used.

The server receives every camera at 10 Hz but uses only the frame each request picks.
Subscribing with ``raw=True`` hands the callback the message's CDR bytes; the header
stamp, all the buffers need to pick a frame, is read straight from those bytes, and
only the chosen frame is deserialized. That skips building a Python Image (and its
230 KB data array) for every frame nobody uses.

CDR layout of sensor_msgs/Image (and CompressedImage, which also starts with a
Header) as the rmw serializes it: a 4-byte encapsulation
header (``00 01``: little-endian CDR, ``00 00``: big-endian; then two option bytes),
then ``header.stamp.sec`` (int32) and ``header.stamp.nanosec`` (uint32), both aligned
to 4 relative to the end of the encapsulation header, then the rest.
"""

from __future__ import annotations

import struct

from rclpy.serialization import deserialize_message
from sensor_msgs.msg import CompressedImage, Image

from xinfer_ros.serving.image_conversion import ImageConversionError

__all__ = ["RawImage", "deserialize_image", "peek_stamp"]

_ENCAPSULATION_BYTES = 4
# Encapsulation identifiers of plain CDR (XCDR1), whose first fields sit right after
# the encapsulation header; other representations are deserialized in full.
_PLAIN_CDR = {b"\x00\x00": ">", b"\x00\x01": "<"}
_STAMP = {order: struct.Struct(order + "iI") for order in _PLAIN_CDR.values()}


def peek_stamp(cdr: bytes) -> tuple[int, int] | None:
    """The ``header.stamp`` (sec, nanosec) of a serialized message that starts with a Header.

    Args:
        cdr: The message as the rmw serialized it (``raw=True`` subscriptions).

    Returns:
        ``(sec, nanosec)``, or ``None`` when ``cdr`` is not plain CDR or is too short to
        hold a stamp (the caller then deserializes the whole message).
    """
    order = _PLAIN_CDR.get(bytes(cdr[:2]))
    if order is None or len(cdr) < _ENCAPSULATION_BYTES + _STAMP[order].size:
        return None
    sec, nanosec = _STAMP[order].unpack_from(cdr, _ENCAPSULATION_BYTES)
    return sec, nanosec


def deserialize_image(cdr: bytes, message_type: type[Image | CompressedImage] = Image
                      ) -> Image | CompressedImage:
    """A sensor_msgs/Image (or ``message_type``, e.g. CompressedImage) from CDR bytes.

    Raises:
        ImageConversionError: When the bytes are not a serialized image (truncated or
            corrupt), so the request using the frame gets a reason like any bad image.
    """
    try:
        return deserialize_message(cdr, message_type)
    except RuntimeError as exc:  # rclpy raises RMWError, a RuntimeError
        raise ImageConversionError(
            f"image message of {len(cdr)} bytes cannot be deserialized: {exc}") from exc


class RawImage:
    """One serialized camera frame with its stamp.

    Attributes:
        cdr: The serialized sensor_msgs/Image (or CompressedImage).
        message_type: ``Image`` or ``CompressedImage``.
        stamp_s: ``header.stamp`` in seconds.
    """

    __slots__ = ("_message", "cdr", "message_type", "stamp_s")

    def __init__(self, cdr: bytes, message_type: type[Image | CompressedImage] = Image) -> None:
        """Keep ``cdr``; read its stamp, deserializing only when it cannot be peeked.

        Raises:
            ImageConversionError: When the stamp cannot be peeked and the bytes do not
                deserialize either.
        """
        self.cdr = cdr
        self.message_type = message_type
        self._message: Image | CompressedImage | None = None
        stamp = peek_stamp(cdr)
        if stamp is None:
            self._message = deserialize_image(cdr, message_type)
            stamp = (self._message.header.stamp.sec, self._message.header.stamp.nanosec)
        self.stamp_s = stamp[0] + stamp[1] * 1e-9

    @property
    def nbytes(self) -> int:
        """Bytes this frame holds: its CDR, plus the message when it had to be built."""
        held = 0 if self._message is None else len(self._message.data)
        return len(self.cdr) + held

    @property
    def compressed(self) -> bool:
        """Whether the frame is a CompressedImage (JPEG/PNG bytes)."""
        return self.message_type is CompressedImage

    def message(self) -> Image | CompressedImage:
        """The deserialized message, built afresh on each call.

        Not kept: a stored frame holds its bytes once, which is what the server's frame
        budget counts (nearly every frame is picked by some request, so keeping the
        message would double the frame store).

        Raises:
            ImageConversionError: When the bytes do not deserialize.
        """
        if self._message is not None:
            return self._message
        return deserialize_image(self.cdr, self.message_type)
