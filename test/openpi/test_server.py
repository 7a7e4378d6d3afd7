"""The endpoint against this project's own client (protocol details, limits, errors)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

import numpy as np
import pytest
import websockets
from websockets.sync.client import connect

from xinfer_ros.cli.serve import build_parser
from xinfer_ros.openpi.client import OpenPIClient, ServerError
from xinfer_ros.openpi.codec import packb, unpackb
from xinfer_ros.openpi.server import ServerConfig

pytestmark = pytest.mark.timeout(60)


def libero(**over: Any) -> dict[str, Any]:
    obs = {"observation/image": np.zeros((224, 224, 3), np.uint8),
           "observation/wrist_image": np.zeros((224, 224, 3), np.uint8),
           "observation/state": np.zeros(8), "prompt": "stack the blocks"}
    obs.update(over)
    return obs


def uri(server: Any, path: str = "") -> str:
    return f"ws://127.0.0.1:{server.port}{path}"


def http_get(server: Any, path: str, key: str | None = None) -> tuple[int, str]:
    req = urllib.request.Request(f"http://127.0.0.1:{server.port}{path}")
    if key:
        req.add_header("Authorization", f"Api-Key {key}")
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_loopback_by_default() -> None:
    assert ServerConfig().host == "127.0.0.1"
    from xinfer_ros.cli.serve import server_params

    assert server_params(build_parser().parse_args(["--openpi"]))["openpi_host"] == "127.0.0.1"


def test_metadata_reply_and_health(start_server: Any) -> None:
    server = start_server()
    assert http_get(server, "/healthz") == (200, "OK\n")
    with OpenPIClient(uri(server)) as client:
        meta = client.metadata
        assert meta["policy"] == "xinfer" and meta["emulated"] is True
        assert meta["action_horizon"] == 16 and meta["action_dim"] == 14
        assert len(meta["cameras"]) == 3 and "xinfer/budget_ms" in meta["xinfer_keys"]
        first = client.infer(libero())
        second = client.infer(libero())
    assert first["actions"].shape == (16, 7) and first["actions"].dtype == np.float64
    assert set(first["server_timing"]) == {"infer_ms"}
    assert set(second["server_timing"]) == {"infer_ms", "prev_total_ms"}
    assert first["xinfer/image_mask"] == [True, True, False]
    assert first["xinfer/robot_id"] == "openpi-1" and first["xinfer/budget_ms"] == 180.0
    assert first["xinfer/timings"]["action_ms"] > 0
    status, body = http_get(server, "/stats")
    assert status == 200 and json.loads(body)["robots"]["openpi-1"]["ok"] == 2


def test_errors_are_text_frames_and_the_connection_stays_usable(start_server: Any,
                                                                  engine: Any) -> None:
    server = start_server()
    with connect(uri(server), compression=None) as ws:
        unpackb(ws.recv(timeout=5))
        for bad in (b"\xc1garbage", "a text frame", packb([1, 2]),
                    packb(libero(**{"observation/state": np.zeros(99)})),
                    packb(libero(**{"xinfer/budget_ms": -1.0}))):
            ws.send(bad)
            reply = ws.recv(timeout=10)
            assert isinstance(reply, str), reply
            assert reply.split(":")[0] in ("invalid_message", "invalid_observation")
            assert "connection stays open" in reply
        ws.send(packb(libero()))
        ok = unpackb(ws.recv(timeout=10))
    assert ok["actions"].shape == (16, 7)
    assert len(engine.robots) == 1       # nothing malformed reached the engine
    # /stats times every answer, refusals included, with the chunks' beside.
    answers = json.loads(http_get(server, "/stats")[1])["answers"]
    assert answers["count"] == 6 and answers["refused"] == 5
    assert answers["p50_ms"] <= answers["chunk_p50_ms"]  # refusals answer fast here


def test_budget_robot_id_and_rtc_fields_reach_the_engine(start_server: Any,
                                                         engine: Any) -> None:
    server = start_server()
    with OpenPIClient(uri(server)) as client:
        reply = client.infer(libero(**{"xinfer/robot_id": "arm_7", "xinfer/budget_ms": 90.0,
                                        "xinfer/prev_chunk": np.ones((16, 7)),
                                        "xinfer/commit_steps": 5, "xinfer/seed": 11}))
        with pytest.raises(ServerError, match="differs from this connection"):
            client.infer(libero(**{"xinfer/robot_id": "someone_else"}))
    assert reply["xinfer/robot_id"] == "arm_7"
    assert engine.robots == ["arm_7"] and engine.budgets == [90.0]
    inputs = engine.inputs[0]
    assert inputs.commit == 5 and inputs.seed == 11 and inputs.prev_chunk.shape == (16, 14)
    assert inputs.prev_dims == 7  # LIBERO's 7 of 14: the rest is padding for the model
    assert [im.shape for im in inputs.images] == [(224, 352, 3), (224, 320, 3),
                                                  (224, 320, 3)]
    assert inputs.state.shape == (14,) and inputs.instruction == "stack the blocks"


def test_api_key(start_server: Any) -> None:
    server = start_server(api_key="s3cret")
    with pytest.raises(websockets.InvalidStatus) as info:
        OpenPIClient(uri(server))
    assert info.value.response.status_code == 401
    with pytest.raises(websockets.InvalidStatus):
        OpenPIClient(uri(server), api_key="wrong")
    assert http_get(server, "/healthz")[0] == 200          # health needs no key
    assert http_get(server, "/stats")[0] == 401
    assert http_get(server, "/stats", key="s3cret")[0] == 200
    with OpenPIClient(uri(server), api_key="s3cret") as client:
        assert client.infer(libero())["actions"].shape == (16, 7)


def test_allowlist_and_one_connection_per_robot(start_server: Any) -> None:
    server = start_server(allowlist=("r1", "r2"))
    with pytest.raises(websockets.InvalidStatus) as info:
        OpenPIClient(uri(server, "/intruder"))
    assert info.value.response.status_code == 403
    with OpenPIClient(uri(server, "/r1")) as client:
        assert client.metadata["robot_id"] == "r1"
        assert client.infer(libero())["xinfer/robot_id"] == "r1"
        with pytest.raises(websockets.InvalidStatus) as info:
            OpenPIClient(uri(server, "/r1"))
        assert info.value.response.status_code == 409
    # Unnamed connection on an allowlisted server: a readable error, then closed.
    with OpenPIClient(uri(server)) as anon:
        with pytest.raises(ServerError, match="allowlist"):
            anon.infer(libero())
        with pytest.raises(websockets.ConnectionClosed):
            anon.infer(libero())
    # Named in the observation instead of the path.
    with OpenPIClient(uri(server)) as named:
        assert named.infer(libero(**{"xinfer/robot_id": "r2"}))["xinfer/robot_id"] == "r2"


def test_message_size_is_bounded(start_server: Any) -> None:
    server = start_server(max_message_bytes=64 * 1024)
    with OpenPIClient(uri(server)) as client:
        with pytest.raises(websockets.ConnectionClosed) as info:
            client.infer(libero())           # ~300 kB of images
            client.infer(libero())
        assert info.value.rcvd is not None and info.value.rcvd.code == 1009
    small = {"observation/image": np.zeros((32, 32, 3), np.uint8),
             "observation/wrist_image": np.zeros((32, 32, 3), np.uint8),
             "observation/state": np.zeros(8), "prompt": "x"}
    with OpenPIClient(uri(server)) as client:          # the server still serves
        assert client.infer(small)["actions"].shape == (16, 7)


def test_large_messages_are_prepared_off_the_event_loop(start_server: Any) -> None:
    server = start_server(inline_prepare_bytes=1024)
    aloha = {"images": {"cam_high": np.zeros((3, 480, 640), np.uint8),
                        "cam_left_wrist": np.zeros((480, 640, 3), np.uint8)},
             "state": np.zeros(14), "prompt": "fold"}
    with OpenPIClient(uri(server)) as client:
        reply = client.infer(aloha)
        with pytest.raises(ServerError, match="invalid_observation"):
            client.infer({**aloha, "state": np.zeros(15)})
    assert reply["actions"].shape == (16, 14)
    assert reply["xinfer/image_mask"] == [True, True, False]


@pytest.mark.torch
def test_libero_client_gets_pi0_tiny_chunks_with_the_third_camera_masked() -> None:
    """A real π0 engine (pi0-tiny, torch) behind the endpoint; LIBERO has 2 of 3 cameras."""
    pytest.importorskip("torch")
    from xinfer_ros.engine.backends import make_backend
    from xinfer_ros.engine.engine import StageEngine
    from xinfer_ros.openpi.layouts import ModelSpec
    from xinfer_ros.openpi.server import OpenPIServer, ServerThread

    backend = make_backend("torch", model="pi0-tiny")
    model = ModelSpec.from_io(backend.io)
    assert model.masks_missing_cameras and model.horizon == 50
    recorded: list[Any] = []
    with StageEngine(backend, "xinfer") as engine:
        real_submit = engine.submit

        def submit(inputs: Any, *args: Any, **kwargs: Any) -> Any:
            recorded.append(inputs)
            return real_submit(inputs, *args, **kwargs)

        engine.submit = submit  # type: ignore[method-assign]
        thread = ServerThread(OpenPIServer(engine, model, ServerConfig(port=0,
                                                                       default_budget_ms=5000)))
        thread.start()
        try:
            with OpenPIClient(uri(thread)) as client:
                reply = client.infer(libero(**{"observation/image": np.full((256, 256, 3), 90,
                                                                         np.uint8)}))
        finally:
            thread.close()
    assert reply["actions"].shape == (50, 7)  # LIBERO's 7 of the model's 14 dimensions
    assert np.all(np.isfinite(reply["actions"])) and reply["xinfer/image_mask"] == \
        [True, True, False]
    images = recorded[0].images
    assert images[2] is None and images[0].shape == (112, 112, 3)  # letterboxed, masked


def test_api_key_comes_from_a_file_or_the_environment(tmp_path: Any,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from xinfer_ros.openpi.server import API_KEY_ENV, resolve_api_key

    monkeypatch.delenv(API_KEY_ENV, raising=False)
    assert resolve_api_key(None) is None
    monkeypatch.setenv(API_KEY_ENV, "from-env")
    assert resolve_api_key(None) == "from-env"
    key = tmp_path / "key"
    key.write_text("from-file\n")
    assert resolve_api_key(str(key)) == "from-file"
    key.write_text("  \n")
    with pytest.raises(ValueError, match="is empty"):
        resolve_api_key(str(key))
    with pytest.raises(ValueError, match="API key file"):
        resolve_api_key(str(tmp_path / "missing"))
    # The key is no parameter or argument that ps or ros2 param get would show.
    assert "--api-key" not in build_parser().format_help().replace("--api-key-file", "")
