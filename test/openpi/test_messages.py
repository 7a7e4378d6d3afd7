"""The endpoint's messages as sent match their types in :mod:`xinfer_ros.openpi.messages`.

A client that codes against ``Reply`` or ``EndpointStats`` reads what the server sends:
a key the server adds, drops or renames shows up here, not in a robot's run.
"""

from __future__ import annotations

import json
import urllib.request
from typing import Any

import numpy as np
import pytest

from xinfer_ros.openpi.client import OpenPIClient
from xinfer_ros.openpi.messages import AnswerLatency, EndpointStats, Reply, ServerTiming

pytestmark = pytest.mark.timeout(60)


def _libero() -> dict[str, Any]:
    return {"observation/image": np.zeros((224, 224, 3), np.uint8),
            "observation/wrist_image": np.zeros((224, 224, 3), np.uint8),
            "observation/state": np.zeros(8), "prompt": "stack the blocks"}


def test_a_chunk_reply_has_every_key_of_reply_and_no_other(start_server: Any) -> None:
    server = start_server()
    with OpenPIClient(f"ws://127.0.0.1:{server.port}") as client:
        client.infer(_libero())
        reply = client.infer(_libero())
    assert set(reply) == set(Reply.__annotations__)
    assert set(reply["server_timing"]) == set(ServerTiming.__annotations__)
    assert isinstance(reply["xinfer/request_id"], int)
    assert isinstance(reply["xinfer/timings"], dict) and reply["xinfer/timings"]


def test_stats_json_has_the_keys_of_endpoint_stats(start_server: Any) -> None:
    server = start_server()
    with OpenPIClient(f"ws://127.0.0.1:{server.port}/arm") as client:
        client.infer(_libero())
    with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/stats", timeout=5) as resp:
        stats = json.loads(resp.read())
    assert set(stats) == set(EndpointStats.__annotations__)
    assert set(stats["answers"]) == set(AnswerLatency.__annotations__)
    assert stats["robots"]["arm"] == {"requests": 1, "ok": 1, "errors": 0, "connections": 1}
