"""The engine's statuses are the codes ``ActionChunk.status`` carries to robots."""

import pytest

pytest.importorskip("rclpy")
pytestmark = pytest.mark.ros

from xinfer_ros.msg import ActionChunk  # noqa: E402

from xinfer_ros.engine.api import Status  # noqa: E402


def test_every_status_is_an_action_chunk_status_code_of_the_same_name() -> None:
    codes = {name.removeprefix("STATUS_"): getattr(ActionChunk, name)
             for name in dir(ActionChunk) if name.startswith("STATUS_")}
    assert codes == {status.name: status.value for status in Status}
