"""Serialized camera frames: the stamp peek and the deferred conversion."""

import random
import struct

import numpy as np
import pytest

pytest.importorskip("rclpy")
pytestmark = pytest.mark.ros

from rclpy.serialization import serialize_message  # noqa: E402
from sensor_msgs.msg import Image  # noqa: E402

from xinfer_ros.nodes.raw_image import RawImage, deserialize_image, peek_stamp  # noqa: E402
from xinfer_ros.serving.image_conversion import (  # noqa: E402
    ImageConversionError,
    image_to_rgb,
    rgb_to_image_fields,
)
from xinfer_ros.serving.observations import RobotObservations, stamp_seconds  # noqa: E402

RNG = np.random.default_rng(7)


def image(sec: int, nanosec: int, frame_id: str, shape=(6, 5), encoding="rgb8") -> Image:
    msg = Image(**rgb_to_image_fields(RNG.integers(0, 256, (*shape, 3), dtype=np.uint8)))
    msg.encoding = encoding
    msg.header.stamp.sec, msg.header.stamp.nanosec = sec, nanosec
    msg.header.frame_id = frame_id
    return msg


def test_peeked_stamp_equals_the_deserialized_one() -> None:
    rand = random.Random(3)
    for _ in range(200):
        sec = rand.randint(-(2**31), 2**31 - 1)
        nanosec = rand.randint(0, 999_999_999)
        frame_id = "".join(rand.choice("abc_/0123456789") for _ in range(rand.randint(0, 40)))
        cdr = serialize_message(image(sec, nanosec, frame_id))
        back = deserialize_image(cdr).header.stamp
        assert peek_stamp(cdr) == (back.sec, back.nanosec) == (sec, nanosec)
        raw = RawImage(cdr)
        assert raw.stamp_s == stamp_seconds(back)


def test_peek_reads_big_endian_cdr_and_declines_what_it_cannot_read() -> None:
    big_endian = b"\x00\x00\x00\x00" + struct.pack(">iI", 1_700_000_000, 123) + b"\x00" * 8
    assert peek_stamp(big_endian) == (1_700_000_000, 123)
    cdr = serialize_message(image(5, 6, "cam"))
    assert peek_stamp(b"\x00\x07" + cdr[2:]) is None  # another representation
    assert peek_stamp(cdr[:11]) is None  # too short to hold a stamp
    assert peek_stamp(b"") is None


def test_raw_frame_converts_exactly_like_the_message() -> None:
    for encoding in ("rgb8", "bgr8"):
        msg = image(12, 345, "camera_0", shape=(224, 352), encoding=encoding)
        cdr = serialize_message(msg)
        raw = RawImage(cdr)
        out = raw.message()
        assert out.header == msg.header
        np.testing.assert_array_equal(image_to_rgb(out), image_to_rgb(msg))
        # A stored frame holds its bytes once: the message is not kept beside them.
        assert raw.nbytes == len(cdr) and raw.message() is not out


def test_bad_frames_keep_their_reasons() -> None:
    truncated = image(1, 2, "c", shape=(4, 4))
    truncated.data = bytes(truncated.data)[:10]
    with pytest.raises(ImageConversionError, match="truncated"):
        image_to_rgb(RawImage(serialize_message(truncated)).message())
    wrong = RawImage(serialize_message(image(1, 2, "c", encoding="yuv422")))
    with pytest.raises(ImageConversionError, match="encoding 'yuv422'"):
        image_to_rgb(wrong.message())
    cdr = serialize_message(image(1, 2, "c"))
    with pytest.raises(ImageConversionError, match="cannot be deserialized"):
        RawImage(cdr[:30]).message()  # a stamp, then garbage
    with pytest.raises(ImageConversionError, match="cannot be deserialized"):
        RawImage(b"\x00\x07" + cdr[2:30])  # no stamp to peek, and no message either


def test_buffers_pick_raw_frames_by_their_peeked_stamps() -> None:
    obs = RobotObservations(cameras=1)
    frames = [RawImage(serialize_message(image(100, ns, "c"))) for ns in (0, 500_000_000)]
    for frame in frames:
        obs.add_image(0, frame, now=0.0, stamp_s=frame.stamp_s)
    obs.add_state(image(100, 600_000_000, "joints"), now=0.0)  # anything with a header
    picked, _ = obs.assemble(100.55, max_age=0.5)
    assert picked == [frames[1]]
    picked, _ = obs.assemble(100.2, max_age=0.5)
    assert picked == [frames[0]]
