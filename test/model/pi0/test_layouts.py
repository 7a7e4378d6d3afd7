"""A checkpoint of each layout serves what its training pipeline would.

Each test writes a small random checkpoint (UNSEEN_CONFIG: 7 joints, 2 cameras of
56 px, chunk 12, 4 steps), serves one request through the server's path (the ROS
front end's ``request_inputs``, the torch backend and the stage engine) and compares
the chunk with the pipeline's output computed here by hand: the state normalised with
the source's own formula, transformers' ``sample_actions`` on the same tensors and
noise, the actions unnormalised, and for relative actions the raw state added back on
the joint mask. ``xinfer-check-checkpoint --json`` runs on every checkpoint.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from xinfer_ros.cli import check_checkpoint  # noqa: E402
from xinfer_ros.model.pi0.checkpoint import save_checkpoint, write_lerobot_pipeline  # noqa: E402
from xinfer_ros.model.pi0.tokenizer import offline_tokenizer  # noqa: E402

from .conftest import robot_preset  # noqa: E402

pytestmark = pytest.mark.torch

DIM = 7
INSTRUCTION = "put the red block in the box"
SEED = 7
#: lerobot's action names: the gripper last, which relative actions keep absolute.
ACTION_NAMES = [f"joint_{i}" for i in range(DIM - 1)] + ["gripper"]


@dataclasses.dataclass(frozen=True)
class HandPipeline:
    """One layout's pipeline, as its source code defines it (written out here)."""

    normalize_state: Any
    unnormalize_action: Any
    relative_mask: np.ndarray | None = None


def _observation() -> tuple[list[np.ndarray], np.ndarray]:
    rng = np.random.default_rng(5)
    # At the model's 56 px: no resampling, so the pixels are x / 255 * 2 - 1 exactly.
    images = [rng.integers(0, 256, (56, 56, 3), dtype=np.uint8) for _ in range(2)]
    return images, rng.uniform(-1.5, 1.5, DIM)


def _serve(preset: Path, ckpt: Path) -> np.ndarray:
    """One request as the ROS server runs it: front end, torch backend, engine."""
    from xinfer_ros.engine import EngineConfig, StageEngine, make_backend
    from xinfer_ros.serving.frontend import FlatChunk, request_inputs

    backend = make_backend("torch", model=str(preset), model_path=str(ckpt), device="cpu",
                           threads=1)
    images, state = _observation()
    horizon, dim = backend.action_shape
    inputs = request_inputs("arm_1", "", INSTRUCTION, lambda: (images, state.tolist()),
                            prev=FlatChunk((), horizon, dim), commit=None,
                            action_shape=backend.action_shape, seed=SEED)
    with StageEngine(backend, "fifo", EngineConfig(slots=(1, 1, 1))) as engine:
        result = engine.submit(inputs, 30.0, "arm_1").result(120)
    assert result.ok, result.reason
    return np.asarray(result.actions)


def _expected(model: Any, hand: HandPipeline) -> np.ndarray:
    """The pipeline's chunk: by hand around transformers' sample_actions."""
    config = model.config
    images, raw = _observation()
    tok = offline_tokenizer()
    pixels = torch.tensor(np.stack([im.transpose(2, 0, 1) for im in images]) / 255.0 * 2 - 1,
                          dtype=torch.float32)[None]
    visual = [config.vlm_config.image_token_id] * (2 * 16)
    text = [tok.bos_token_id] + tok(INSTRUCTION + "\n", add_special_tokens=False)["input_ids"]
    ids = visual + text + [tok.pad_token_id] * (64 - len(text))
    mask = [1] * (len(visual) + len(text)) + [0] * (64 - len(text))
    state = np.zeros(config.max_state_dim, np.float32)
    state[:DIM] = hand.normalize_state(raw)
    noise = torch.randn((1, config.chunk_size, config.max_action_dim),
                        generator=torch.Generator().manual_seed(SEED))
    with torch.no_grad():
        actions = model.sample_actions(
            state=torch.tensor(state)[None], input_ids=torch.tensor([ids]),
            pixel_values=pixels, noise=noise, attention_mask=torch.tensor([mask]),
            pixel_attention_mask=torch.tensor([[True, True]]))
    out = hand.unnormalize_action(actions[0, :, :DIM].double().numpy())
    if hand.relative_mask is not None:
        out = out + np.where(hand.relative_mask, raw, 0.0)
    return np.asarray(out)


def _report(ckpt: Path, preset: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    assert check_checkpoint.main([str(ckpt), "--model", str(preset), "--json"]) == 0
    return dict(json.loads(capsys.readouterr().out))


def _stats(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    low = rng.normal(size=DIM)
    return {"mean": low, "std": rng.uniform(0.2, 2.0, DIM), "min": low - 1.0,
            "max": low + rng.uniform(0.5, 3.0, DIM)}


def test_transformers_layout_uses_its_processor_statistics(
        unseen_model: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ckpt = save_checkpoint(unseen_model, tmp_path / "ckpt", tokenizer=offline_tokenizer())
    state, action = _stats(1), _stats(2)
    # What PI0Processor.save_pretrained writes (its image processor left out).
    (ckpt / "processor_config.json").write_text(json.dumps({
        "processor_class": "PI0Processor", "chunk_size": 12, "max_state_dim": 24,
        "state_mean": state["mean"].tolist(), "state_std": state["std"].tolist(),
        "actions_mean": action["mean"].tolist(), "actions_std": action["std"].tolist()}))
    preset = robot_preset(tmp_path)
    # transformers' PI0Processor.normalize: (x - mean) / (std + 1e-8); its inverse.
    hand = HandPipeline(lambda x: (x - state["mean"]) / (state["std"] + 1e-8),
                        lambda a: a * (action["std"] + 1e-8) + action["mean"])
    chunk = _serve(preset, ckpt)
    assert chunk.shape == (12, DIM)
    np.testing.assert_allclose(chunk, _expected(unseen_model, hand), rtol=0, atol=1e-5)

    report = _report(ckpt, preset, capsys)
    assert report["layout"] == "transformers" and report["steps"] == []
    assert report["cameras"] == ["cam_0", "cam_1"]
    assert (report["state_dim"], report["action_dim"], report["max_action_dim"]) == (7, 7, 24)
    assert (report["chunk_size"], report["num_steps"], report["dtype"]) == (12, 4, "float32")
    assert report["normalization_source"] == str(ckpt / "processor_config.json")
    assert report["state"] == {"mode": "mean_std", "convention": "transformers",
                               "eps": 1e-8, "width": 7}
    assert report["relative_mask"] is None and report["unused_files"] == []
    assert report["tokenizer"]["size"] == 260 and report["tokenizer"]["newline"] == "always"
    assert check_checkpoint.main([str(ckpt), "--model", str(preset)]) == 0
    text = capsys.readouterr().out.splitlines()
    assert "layout: transformers" in text and "unused files: none" in text
    assert "  state: mean_std (transformers convention, eps 1e-08, width 7)" in text
    # The processor pads to its own width: one that is not the model's is refused.
    data = json.loads((ckpt / "processor_config.json").read_text())
    (ckpt / "processor_config.json").write_text(json.dumps(data | {"max_state_dim": 32}))
    assert check_checkpoint.main([str(ckpt), "--model", str(preset)]) == 2
    assert capsys.readouterr().err == f"error: {ckpt / 'processor_config.json'}: " \
                                      "max_state_dim: 32 but the model's config says 24\n"


@pytest.mark.parametrize("relative", [False, True])
def test_lerobot_layout_runs_its_saved_pipeline(
        unseen_model: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        relative: bool) -> None:
    ckpt = save_checkpoint(unseen_model, tmp_path / "ckpt", layout="lerobot")
    state, action = _stats(3), _stats(4)
    # The tokenizer travels as the tokenizer step's artifact (ckpt/tokenizer/), as
    # current lerobot saves it; actions min-max normalised, the state mean-std.
    write_lerobot_pipeline(ckpt, state, action, action_mode="MIN_MAX", relative=relative,
                           action_names=ACTION_NAMES, max_length=64,
                           tokenizer=offline_tokenizer())
    (ckpt / "README.md").write_text("trained on my arm\n")
    preset = robot_preset(tmp_path)
    span = action["max"] - action["min"]
    # lerobot's _NormalizationMixin: (x - mean) / (std + eps); back (a + 1) / 2 * span + min.
    hand = HandPipeline(lambda x: (x - state["mean"]) / (state["std"] + 1e-8),
                        lambda a: (a + 1.0) / 2.0 * span + action["min"],
                        np.array([True] * (DIM - 1) + [False]) if relative else None)
    chunk = _serve(preset, ckpt)
    expected = _expected(unseen_model, hand)
    np.testing.assert_allclose(chunk, expected, rtol=0, atol=1e-5)

    report = _report(ckpt, preset, capsys)
    assert report["layout"] == "lerobot"
    assert report["tokenizer"]["source"] == str(ckpt / "tokenizer")
    assert report["tokenizer"]["newline"] == "if_missing"
    assert report["tokenizer"]["prompt_tokens"] == 64
    assert report["state"]["mode"] == "mean_std" and report["action"]["mode"] == "min_max"
    assert report["action"]["convention"] == "lerobot" and report["action"]["eps"] == 1e-8
    assert [(s["file"], s["name"]) for s in report["steps"]][-4:] == [
        ("policy_preprocessor.json", "normalizer_processor"),
        ("policy_postprocessor.json", "unnormalizer_processor"),
        ("policy_postprocessor.json", "absolute_actions_processor"),
        ("policy_postprocessor.json", "device_processor")]
    assert report["unused_files"] == ["README.md"]
    if relative:
        assert report["relative_mask"] == [True] * 6 + [False]
        assert report["transforms"][-1] == "actions: raw state added back on dimensions " \
                                           "[0, 1, 2, 3, 4, 5]"
    else:
        assert report["relative_mask"] is None


def test_relative_rtc_previous_chunk_is_reanchored_on_the_current_state(
        unseen_model: Any, tmp_path: Path) -> None:
    from xinfer_ros.model.loading import load_stage_model

    ckpt = save_checkpoint(unseen_model, tmp_path / "ckpt", tokenizer=offline_tokenizer())
    state, action = _stats(5), _stats(6)
    write_lerobot_pipeline(ckpt, state, action, relative=True, action_names=ACTION_NAMES,
                           max_length=64)
    model = load_stage_model(str(robot_preset(tmp_path)), model_path=ckpt)
    images, raw = _observation()
    prev = np.random.default_rng(9).normal(size=(12, DIM))
    prepared = model.prepare(images, INSTRUCTION, raw, prev_chunk=prev, d=2,
                             prev_shift=2).prepared
    # lerobot's reanchor_relative_rtc_prefix: prev - state on the mask, then normalised.
    relative = prev[2:] - np.where(np.arange(DIM) < DIM - 1, raw, 0.0)
    np.testing.assert_allclose(prepared.rtc.aligned_norm[:10],
                               (relative - action["mean"]) / (action["std"] + 1e-8),
                               rtol=1e-5, atol=1e-6)
