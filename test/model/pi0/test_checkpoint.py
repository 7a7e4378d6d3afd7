"""π0 checkpoint directories: both layouts load identically; unusable ones fail clearly."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from safetensors.torch import load_file, save_file  # noqa: E402

from xinfer_ros.model.errors import CheckpointError  # noqa: E402
from xinfer_ros.model.loading import load_stage_model  # noqa: E402
from xinfer_ros.model.pi0.checkpoint import lerobot_key, save_checkpoint  # noqa: E402
from xinfer_ros.model.pi0.preset import Pi0Preset, resolve_pi0  # noqa: E402
from xinfer_ros.model.pi0.tokenizer import offline_tokenizer  # noqa: E402
from xinfer_ros.model.presets import load_model_preset  # noqa: E402

from .conftest import robot_preset, write_stats  # noqa: E402

pytestmark = pytest.mark.torch


def _chunk(model: Any, seed: int = 3) -> np.ndarray:
    rng = np.random.default_rng(seed)
    images = [rng.integers(0, 256, (48, 64, 3), dtype=np.uint8) for _ in model.io.cameras]
    prev = rng.normal(size=model.io.action_shape)
    state = model.prepare(images, "put the block in the box", rng.normal(size=7),
                          prev_chunk=prev, d=3, prev_shift=2, seed=seed)
    model.vit(state)
    model.prefill(state)
    model.action(state)
    return model.finish(state)


@pytest.fixture
def robot(tmp_path: Path) -> Path:
    return robot_preset(tmp_path)


@pytest.mark.parametrize("layout", ["transformers", "lerobot"])
def test_both_layouts_load_with_identical_outputs(unseen_model: Any, robot: Path,
                                                  tmp_path: Path, layout: str) -> None:
    ckpt = save_checkpoint(unseen_model, tmp_path / layout, layout=layout,
                           tokenizer=offline_tokenizer())
    stats = write_stats(ckpt, "lerobot" if layout == "lerobot" else "openpi")
    names = set(load_file(str(ckpt / "model.safetensors")))
    if layout == "lerobot":
        assert "model.paligemma_with_expert.paligemma.lm_head.weight" in names
        assert "model.paligemma_with_expert.gemma_expert.model.layers.0.mlp.up_proj.weight" \
            in names
        assert "model.state_proj.weight" in names and "model.action_out_proj.weight" in names
        assert not any(n.startswith(("model.vlm.", "embed_action_time.")) for n in names)
    else:  # whatever transformers' own save_pretrained writes (it reverses its mapping)
        assert not any(n.startswith("model.") for n in names)
    served = load_stage_model(str(robot), model_path=ckpt)
    ours = served.module.state_dict()
    for key, value in unseen_model.state_dict().items():
        assert torch.equal(value, ours[key]), key
    assert served.io.horizon == 12 and served.io.action_dim == 7
    assert served.spec.normalizer.source.endswith(
        "normalizer_processor.safetensors" if layout == "lerobot" else "norm_stats.json")
    np.testing.assert_allclose(served.spec.normalizer.state.low, stats["state"]["mean"],
                               rtol=1e-6)
    # The same weights written the other way serve the very same chunk.
    other = save_checkpoint(served.module, tmp_path / "again", tokenizer=offline_tokenizer())
    shutil.copytree(ckpt, other, dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns("model.safetensors", "config.json"))
    np.testing.assert_array_equal(_chunk(served), _chunk(load_stage_model(str(robot),
                                                                          model_path=other)))


def test_lerobot_config_json_names_the_robot(tmp_path: Path) -> None:
    ckpt = tmp_path / "lerobot_pi0"
    ckpt.mkdir()
    (ckpt / "model.safetensors").write_bytes(b"")  # present; not read by resolve
    (ckpt / "config.json").write_text(json.dumps({
        "type": "pi0", "paligemma_variant": "gemma_2b", "action_expert_variant": "gemma_300m",
        "chunk_size": 50, "n_action_steps": 50, "max_state_dim": 32, "max_action_dim": 32,
        "num_inference_steps": 10, "tokenizer_max_length": 48,
        "image_resolution": [224, 224],
        "input_features": {
            "observation.images.top": {"type": "VISUAL", "shape": [3, 480, 640]},
            "observation.images.wrist": {"type": "VISUAL", "shape": [3, 480, 640]},
            "observation.state": {"type": "STATE", "shape": [6]}},
        "output_features": {"action": {"type": "ACTION", "shape": [6]}},
        "normalization_mapping": {"VISUAL": "IDENTITY", "STATE": "MEAN_STD",
                                  "ACTION": "MEAN_STD"}}))
    write_stats(ckpt, "lerobot", dim=6)
    config, spec = resolve_pi0(load_model_preset("pi0"), ckpt)
    default = resolve_pi0(load_model_preset("pi0"))[0]
    assert config.vlm_config.text_config.hidden_size == 2048 == \
        default.vlm_config.text_config.hidden_size
    assert config.dit_config.hidden_size == default.dit_config.hidden_size == 1024
    assert spec.cameras == ("top", "wrist")
    assert (spec.state_dim, spec.action_dim, spec.prompt_tokens) == (6, 6, 48)
    assert (spec.chunk_size, spec.num_steps, spec.tokens_per_image) == (50, 10, 256)
    # empty_cameras: lerobot's validate_features lists them among the input features
    # before saving; an older config does not. Either way each counts once.
    data = json.loads((ckpt / "config.json").read_text())
    for listed in (True, False):
        inputs = dict(data["input_features"])
        if listed:
            inputs["observation.images.empty_camera_0"] = {"type": "VISUAL",
                                                           "shape": [3, 224, 224]}
        (ckpt / "config.json").write_text(json.dumps(data | {"empty_cameras": 1,
                                                             "input_features": inputs}))
        cameras = resolve_pi0(load_model_preset("pi0"), ckpt)[1].cameras
        assert cameras == ("top", "wrist", "empty_camera_0"), listed
    (ckpt / "config.json").write_text(json.dumps(data))
    bad = json.loads((ckpt / "config.json").read_text()) | {"paligemma_variant": "gemma_300m"}
    (ckpt / "config.json").write_text(json.dumps(bad))
    with pytest.raises(CheckpointError, match="paligemma_variant"):
        resolve_pi0(load_model_preset("pi0"), ckpt)


def _broken(tmp_path: Path, unseen_model: Any) -> Path:
    ckpt = save_checkpoint(unseen_model, tmp_path / "ckpt", tokenizer=offline_tokenizer())
    write_stats(ckpt, "openpi")
    return ckpt


def test_unusable_directories_fail_at_load_naming_path_and_problem(
        unseen_model: Any, robot: Path, tmp_path: Path) -> None:
    def fails(path: Path, match: str) -> None:
        with pytest.raises(CheckpointError, match=match) as info:
            load_stage_model(str(robot), model_path=path)
        assert str(path) in str(info.value)

    fails(tmp_path / "nowhere", "not a directory")
    ckpt = _broken(tmp_path, unseen_model)
    config = json.loads((ckpt / "config.json").read_text())
    (ckpt / "config.json").write_text(json.dumps(config | {"model_type": "gemma"}))
    fails(ckpt, "not a PI0 config")
    (ckpt / "config.json").write_text(json.dumps(config))

    weights = load_file(str(ckpt / "model.safetensors"))
    save_file({k: v for k, v in weights.items() if k != "action_out_proj.weight"},
              str(ckpt / "model.safetensors"), metadata={"format": "pt"})
    fails(ckpt, "weights missing.*action_out_proj")
    save_file(weights | {"action_out_proj.weight": torch.zeros(5, 40)},
              str(ckpt / "model.safetensors"), metadata={"format": "pt"})
    fails(ckpt, "weights do not load")
    (ckpt / "model.safetensors").unlink()
    fails(ckpt, "no weights")


def test_missing_tokenizer_and_statistics_and_mismatched_stats(
        unseen_model: Any, robot: Path, tmp_path: Path) -> None:
    ckpt = save_checkpoint(unseen_model, tmp_path / "ckpt")  # no tokenizer, no stats
    with pytest.raises(CheckpointError, match="no normalisation statistics"):
        load_stage_model(str(robot), model_path=ckpt)
    write_stats(ckpt, "openpi", dim=9)  # the robot has 7 joints
    with pytest.raises(CheckpointError, match="state statistics have 9 values"):
        load_stage_model(str(robot), model_path=ckpt)
    write_stats(ckpt, "openpi", dim=7)
    with pytest.raises(CheckpointError, match="no tokenizer"):
        load_stage_model(str(robot), model_path=ckpt)
    offline_tokenizer().save_pretrained(str(tmp_path / "tok"))
    identity = robot_preset(tmp_path / "own", tokenizer_path=str(tmp_path / "tok"))
    assert load_stage_model(str(identity), model_path=ckpt).io.horizon == 12


def test_identity_is_only_used_when_chosen(unseen_model: Any, tmp_path: Path) -> None:
    ckpt = save_checkpoint(unseen_model, tmp_path / "ckpt", tokenizer=offline_tokenizer())
    plain = robot_preset(tmp_path / "plain")
    with pytest.raises(CheckpointError, match="mode: identity"):
        load_stage_model(str(plain), model_path=ckpt)
    chosen = robot_preset(tmp_path, normalization={"mode": "identity"})
    model = load_stage_model(str(chosen), model_path=ckpt)
    assert model.spec.normalizer.state.mode == "identity"
    # A preset's own statistics serve when the checkpoint ships none.
    stats = {"mode": "quantiles", "state": {"q01": [-1.0] * 7, "q99": [1.0] * 7},
             "action": {"q01": [-2.0] * 7, "q99": [2.0] * 7}}
    own = robot_preset(tmp_path / "own", normalization=stats)
    assert load_stage_model(str(own), model_path=ckpt).spec.normalizer.action.mode == \
        "quantiles"


def test_lerobot_key_is_the_inverse_of_transformers_mapping(unseen_model: Any) -> None:
    names = list(unseen_model.state_dict())
    renamed = {lerobot_key(n) for n in names}
    assert len(renamed) == len(names)
    assert all(n.startswith("model.") for n in renamed)


def test_preset_files_parse_and_reject_unknown_keys() -> None:
    preset = load_model_preset("pi0-tiny")
    assert isinstance(preset, Pi0Preset) and preset.state_dim == 14
    spec = resolve_pi0(load_model_preset("pi0"))[1]
    assert (spec.chunk_size, spec.max_state_dim, spec.max_action_dim, spec.num_steps) == \
        (50, 32, 32, 10)
    with pytest.raises(ValueError, match="surprise"):
        Pi0Preset.from_dict({"name": "x", "family": "pi0", "surprise": 1,
                             "robot": {"cameras": ["a"], "state_dim": 1, "action_dim": 1}})
    with pytest.raises(ValueError, match="family 'pi0'"):
        from xinfer_ros.model.config import load_preset

        load_preset("pi0-tiny")
