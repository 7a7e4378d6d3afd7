"""An openpi-trained checkpoint served through the openpi endpoint, per layout.

Each test writes a small π0 checkpoint with openpi's ``norm_stats.json``, serves one
observation through the endpoint (WebSocket, engine, stages) and compares the reply
with openpi's pipeline computed here by hand: the layout's input transforms, openpi's
``Normalize`` (``(x − mean) / (std + 1e-6)``), transformers' own ``sample_actions`` on
the same noise, openpi's ``Unnormalize`` and the layout's output transforms. Images are
sent at the model's size, so no resampling is involved (float32, ≤ 1e-5).
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from xinfer_ros.openpi.client import OpenPIClient  # noqa: E402
from xinfer_ros.openpi.layouts import ALOHA, LIBERO, ModelSpec, ObservationLayout  # noqa: E402
from xinfer_ros.openpi.server import OpenPIServer, ServerConfig, ServerThread  # noqa: E402

from .test_transforms import hand_aloha_actions, hand_aloha_state  # noqa: E402

pytestmark = pytest.mark.torch

#: A small π0: 56 px cameras (16 tokens each), chunk 6, 3 steps, 16-wide padding.
_CONFIG: dict[str, Any] = {
    "chunk_size": 6, "num_inference_steps": 3, "max_state_dim": 16, "max_action_dim": 16,
    "vlm_config": {
        "model_type": "paligemma", "projection_dim": 32, "image_token_id": 300,
        "text_config": {"model_type": "gemma", "hidden_size": 32, "num_hidden_layers": 2,
                        "intermediate_size": 48, "num_attention_heads": 2,
                        "num_key_value_heads": 1, "head_dim": 16, "vocab_size": 300},
        "vision_config": {"model_type": "siglip_vision_model", "hidden_size": 16,
                          "intermediate_size": 24, "num_hidden_layers": 1,
                          "num_attention_heads": 2, "patch_size": 14, "image_size": 56,
                          "vision_use_head": False},
    },
    "dit_config": {"model_type": "gemma", "hidden_size": 32, "num_hidden_layers": 2,
                   "intermediate_size": 48, "num_attention_heads": 2,
                   "num_key_value_heads": 1, "head_dim": 16},
}
OPENPI_EPS = 1e-6  # openpi's Normalize / Unnormalize
SEED = 5


@dataclasses.dataclass
class Served:
    """A checkpoint behind a running endpoint."""

    uri: str
    stats: dict[str, dict[str, np.ndarray]]
    model: Any  # the torch module the engine serves
    processor: Any


def _checkpoint(tmp_path: Path, state_dim: int, action_dim: int) -> tuple[Path, Path, Any]:
    import yaml
    from transformers import PI0Config, PI0ForConditionalGeneration

    from xinfer_ros.model.pi0.checkpoint import save_checkpoint, write_openpi_stats
    from xinfer_ros.model.pi0.tokenizer import offline_tokenizer

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(3)
        module = PI0ForConditionalGeneration(PI0Config(**_CONFIG)).eval()
    ckpt = save_checkpoint(module, tmp_path / "ckpt", tokenizer=offline_tokenizer())
    rng = np.random.default_rng(1)
    stats = {"state": {"mean": rng.normal(size=state_dim) * 0.3,
                       "std": rng.uniform(0.5, 1.5, state_dim)},
             "actions": {"mean": rng.normal(size=action_dim) * 0.3,
                         "std": rng.uniform(0.5, 1.5, action_dim)}}
    write_openpi_stats(ckpt, stats["state"], stats["actions"])
    preset = tmp_path / "robot.yaml"
    preset.write_text(yaml.safe_dump({
        "name": "openpi-robot", "family": "pi0", "transformers_config": {},
        "robot": {"cameras": ["base_0_rgb", "left_wrist_0_rgb", "right_wrist_0_rgb"],
                  "state_dim": state_dim, "action_dim": action_dim},
        "prompt_tokens": 48}))
    return preset, ckpt, stats


@pytest.fixture
def serve(tmp_path: Path) -> Any:
    from xinfer_ros.engine.backends import make_backend
    from xinfer_ros.engine.engine import StageEngine

    started: list[tuple[Any, ServerThread]] = []

    def start(layout: ObservationLayout, state_dim: int, action_dim: int) -> Served:
        torch.set_num_threads(1)
        preset, ckpt, stats = _checkpoint(tmp_path, state_dim, action_dim)
        backend = make_backend("torch", model=str(preset), model_path=str(ckpt))
        engine = StageEngine(backend, "fifo").start()
        thread = ServerThread(OpenPIServer(engine, ModelSpec.from_io(backend.io), ServerConfig(
            port=0, layout=layout, default_budget_ms=10_000)))
        thread.start()
        started.append((engine, thread))
        served = backend.model
        return Served(f"ws://127.0.0.1:{thread.port}", stats, served.module, served.processor)

    yield start
    for engine, thread in started:
        thread.close()
        engine.close(drain_timeout=1.0)


def _expected(served: Served, images: list[np.ndarray | None], prompt: str,
              model_state: np.ndarray) -> np.ndarray:
    """openpi's pipeline around transformers' sample_actions, in the model's frame."""
    from xinfer_ros.model.pi0 import stages
    from xinfer_ros.model.pi0.processing import Pi0Inputs

    st, act = served.stats["state"], served.stats["actions"]
    # Our processor only supplies the tokens and pixels; the state is normalised here.
    prepared = served.processor.prepare(Pi0Inputs(images, prompt, model_state), seed=SEED)
    state = np.zeros(_CONFIG["max_state_dim"], np.float32)
    state[:len(st["mean"])] = (model_state - st["mean"]) / (st["std"] + OPENPI_EPS)
    prepared = dataclasses.replace(prepared, state=state)
    inputs = stages.model_inputs(served.model, prepared)
    with torch.no_grad():
        chunk = served.model.sample_actions(
            state=inputs.state, input_ids=inputs.input_ids, pixel_values=inputs.pixel_values,
            noise=stages.sample_noise(served.model, SEED), attention_mask=inputs.attention_mask,
            pixel_attention_mask=inputs.pixel_attention_mask)
    raw = chunk[0].float().numpy().astype(np.float64)[:, :len(act["mean"])]
    return raw * (act["std"] + OPENPI_EPS) + act["mean"]


def test_aloha_checkpoint_serves_openpis_chunk(serve: Any) -> None:
    served = serve(ALOHA, 14, 14)
    rng = np.random.default_rng(7)
    cams = {name: rng.integers(0, 256, (3, 56, 56), dtype=np.uint8)  # CHW, as ALOHA sends
            for name in ("cam_high", "cam_left_wrist", "cam_right_wrist")}
    state = rng.uniform(-0.5, 0.5, 14)
    state[[6, 13]] = [0.4, 0.7]
    obs = {"images": cams, "state": state, "prompt": " fold_the towel\n", "xinfer/seed": SEED}
    with OpenPIClient(served.uri) as client:
        reply = client.infer(obs)
    model_state = hand_aloha_state(state)
    images = [cams[k].transpose(1, 2, 0) for k in ("cam_high", "cam_left_wrist",
                                                   "cam_right_wrist")]
    model_actions = _expected(served, images, "fold the towel", model_state)
    expected = hand_aloha_actions(model_actions, model_state, delta=True)
    assert reply["actions"].shape == (6, 14)
    np.testing.assert_allclose(reply["actions"], expected, rtol=0, atol=1e-5)


def test_libero_checkpoint_serves_openpis_chunk(serve: Any) -> None:
    served = serve(LIBERO, 8, 7)
    assert served.processor.spec.resample == "pil_bilinear"  # openpi's norm_stats.json
    rng = np.random.default_rng(8)
    base = rng.integers(0, 256, (56, 56, 3), dtype=np.uint8)
    wrist = rng.integers(0, 256, (56, 56, 3), dtype=np.uint8)
    state = rng.uniform(-0.5, 0.5, 8)
    obs = {"observation/image": base, "observation/wrist_image": wrist,
           "observation/state": state, "prompt": "put_the bowl\non the plate ",
           "xinfer/seed": SEED}
    with OpenPIClient(served.uri) as client:
        reply = client.infer(obs)
    model_actions = _expected(served, [base, wrist, None], "put the bowl on the plate", state)
    expected = model_actions.copy()
    expected[:, :6] += state[:6]  # pi0_libero: extra_delta_transform, make_bool_mask(6, -1)
    assert reply["actions"].shape == (6, 7)
    np.testing.assert_allclose(reply["actions"], expected, rtol=0, atol=1e-5)


def test_aloha_frozen_keyframes_return_in_the_robots_frame(serve: Any) -> None:
    """RTC through the transforms: the committed keyframes come back as the robot sent."""
    served = serve(ALOHA, 14, 14)
    rng = np.random.default_rng(9)
    cams = {"cam_high": rng.integers(0, 256, (56, 56, 3), dtype=np.uint8)}
    state = rng.uniform(-0.5, 0.5, 14)
    prev = rng.uniform(-0.5, 0.5, (6, 14))
    prev[:, [6, 13]] = rng.uniform(0.2, 0.8, (6, 2))
    obs = {"images": cams, "state": state, "prompt": "fold", "xinfer/seed": SEED,
           "xinfer/prev_chunk": prev, "xinfer/commit_steps": 2}
    with OpenPIClient(served.uri) as client:
        reply = client.infer(obs)
    np.testing.assert_allclose(reply["actions"][:2], prev[:2], rtol=0, atol=1e-9)


#: Layout -> (state and action widths, adapt_to_pi, delta-action mask), per openpi's configs.
_EXPECTED_LAYOUTS = {
    "pi0_aloha": ((14, 14), True, [True] * 6 + [False] + [True] * 6 + [False]),
    "pi0_libero": ((8, 7), False, [True] * 6 + [False]),
}


@pytest.mark.parametrize("layout", sorted(_EXPECTED_LAYOUTS))
def test_check_checkpoint_reports_what_the_openpi_endpoint_runs(tmp_path: Path, capsys,
                                                                 layout: str) -> None:
    import json

    from xinfer_ros.cli import check_checkpoint

    dims, adapt, mask = _EXPECTED_LAYOUTS[layout]

    preset, ckpt, _ = _checkpoint(tmp_path, *dims)
    assert check_checkpoint.main([str(ckpt), "--model", str(preset), "--layout", layout,
                                  "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["state_dim"] == dims[0] and report["action_dim"] == dims[1]
    assert "norm_stats.json" in report["normalization_source"]
    openpi = report["openpi"]
    # The built-in pi0_* layouts are the aloha and libero layouts under openpi's names.
    assert openpi["layout"] == layout.removeprefix("pi0_") and openpi["adapt_to_pi"] is adapt
    assert openpi["delta_action_mask"] == mask and openpi["clean_prompt"] is True
    assert openpi["resample"] == "pil_bilinear"
    # auto picks per observation, so it cannot say what will run: refused, one line.
    assert check_checkpoint.main([str(ckpt), "--model", str(preset), "--layout", "auto"]) == 2
    assert capsys.readouterr().err.count("\n") == 1
