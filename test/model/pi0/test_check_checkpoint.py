"""Checkpoints the server must refuse: exit 2, one line naming the file and the field."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from xinfer_ros.cli import check_checkpoint  # noqa: E402
from xinfer_ros.model.errors import CheckpointError  # noqa: E402
from xinfer_ros.model.loading import load_stage_model  # noqa: E402
from xinfer_ros.model.pi0.checkpoint import save_checkpoint, write_lerobot_pipeline  # noqa: E402
from xinfer_ros.model.pi0.tokenizer import offline_tokenizer  # noqa: E402

from .conftest import robot_preset  # noqa: E402

pytestmark = pytest.mark.torch

PRE, POST = "policy_preprocessor.json", "policy_postprocessor.json"


@pytest.fixture(scope="module")
def weights(unseen_model: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_checkpoint(unseen_model, tmp_path_factory.mktemp("w") / "ckpt",
                           layout="lerobot")


def _checkpoint(weights: Path, tmp_path: Path, dim: int = 7, **pipeline: Any) -> Path:
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    for name in ("config.json", "model.safetensors"):
        (ckpt / name).symlink_to(weights / name)
    stats = {"mean": np.zeros(dim), "std": np.ones(dim)}
    write_lerobot_pipeline(ckpt, stats, stats, tokenizer=offline_tokenizer(), max_length=64,
                           **pipeline)
    return ckpt


def _edit(path: Path, change: Callable[[dict[str, Any]], None]) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def _refused(ckpt: Path, preset: Path, capsys: pytest.CaptureFixture[str]) -> str:
    assert check_checkpoint.main([str(ckpt), "--model", str(preset)]) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert captured.out == "" and len(lines) == 1, lines
    # The server refuses the same way, before the first request.
    with pytest.raises(CheckpointError) as info:
        load_stage_model(str(preset), model_path=ckpt)
    assert lines[0] == f"error: {info.value}"
    return lines[0]


def test_unknown_pipeline_step(weights: Path, tmp_path: Path,
                               capsys: pytest.CaptureFixture[str]) -> None:
    ckpt = _checkpoint(weights, tmp_path)
    _edit(ckpt / PRE, lambda d: d["steps"].insert(
        2, {"registry_name": "image_crop_resize_processor", "config": {}}))
    line = _refused(ckpt, robot_preset(tmp_path), capsys)
    assert line == f"error: {ckpt / PRE}: steps[2]: unknown step 'image_crop_resize_processor'" \
                   "; this server runs ['device_processor', 'normalizer_processor', " \
                   "'pi0_new_line_processor', 'relative_actions_processor', " \
                   "'rename_observations_processor', 'to_batch_processor', " \
                   "'tokenizer_processor'] in this file"


def test_unregistered_step_class(weights: Path, tmp_path: Path,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    ckpt = _checkpoint(weights, tmp_path)
    _edit(ckpt / POST, lambda d: d["steps"].append(
        {"class": "my_lab.processors.ClipActions", "config": {"limit": 1.0}}))
    line = _refused(ckpt, robot_preset(tmp_path), capsys)
    assert line == f"error: {ckpt / POST}: steps[3]: unknown step " \
                   "'my_lab.processors.ClipActions' (not a registered step; this server " \
                   "cannot run it)"


def test_relative_flag_of_lerobot_config_without_its_pipeline(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ckpt = tmp_path / "lerobot_pi0"
    ckpt.mkdir()
    (ckpt / "model.safetensors").write_bytes(b"")  # resolving never reads the weights
    offline_tokenizer().save_pretrained(str(ckpt))
    config = {"type": "pi0", "use_relative_actions": True, "tokenizer_max_length": 64,
              "input_features": {
                  "observation.images.top": {"type": "VISUAL", "shape": [3, 224, 224]},
                  "observation.state": {"type": "STATE", "shape": [7]}},
              "output_features": {"action": {"type": "ACTION", "shape": [7]}}}
    (ckpt / "config.json").write_text(json.dumps(config))
    preset = robot_preset(tmp_path)
    assert check_checkpoint.main([str(ckpt), "--model", str(preset)]) == 2
    assert capsys.readouterr().err == f"error: {ckpt / 'config.json'}: use_relative_actions " \
        f"is true but there is no {PRE} / {POST} to say which joints are relative\n"
    stats = {"mean": np.zeros(7), "std": np.ones(7)}
    write_lerobot_pipeline(ckpt, stats, stats, max_length=64)  # relative actions off
    assert check_checkpoint.main([str(ckpt), "--model", str(preset)]) == 2
    assert capsys.readouterr().err == f"error: {ckpt / 'config.json'}: " \
        "use_relative_actions=true but the pipeline's relative actions are off\n"
    write_lerobot_pipeline(ckpt, stats, stats, max_length=64, relative=True)
    assert check_checkpoint.main([str(ckpt), "--model", str(preset), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    # lerobot's default exclude_joints (gripper) without action names: every joint.
    assert report["relative_mask"] == [True] * 7 and report["cameras"] == ["top"]


def test_unknown_normalisation_mode(weights: Path, tmp_path: Path,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    ckpt = _checkpoint(weights, tmp_path)
    _edit(ckpt / POST, lambda d: d["steps"][0]["config"]["norm_map"].update(ACTION="LOG_STD"))
    line = _refused(ckpt, robot_preset(tmp_path), capsys)
    assert line.startswith(f"error: {ckpt / POST}: steps[0].config.norm_map.ACTION: unknown "
                           "normalisation mode 'LOG_STD'")


def test_statistics_of_the_wrong_width(weights: Path, tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    ckpt = _checkpoint(weights, tmp_path)

    def narrower(data: dict[str, Any]) -> None:
        data["steps"][6]["config"]["features"]["observation.state"]["shape"] = [6]

    _edit(ckpt / PRE, narrower)
    line = _refused(ckpt, robot_preset(tmp_path), capsys)
    stats = ckpt / "policy_preprocessor_step_6_normalizer_processor.safetensors"
    assert line == f"error: {stats}: observation.state: statistics have 7 values but " \
                   f"config.features.observation.state of {PRE} says 6"
    # Statistics that fit their file but not the robot (9 joints) are refused too.
    wide = tmp_path / "wide"
    wide.mkdir()
    line = _refused(_checkpoint(weights, wide, dim=9), robot_preset(wide), capsys)
    assert line.endswith("state statistics have 9 values but the robot's state has 7 "
                         "dimensions")


def test_relative_actions_without_their_other_half(weights: Path, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    ckpt = _checkpoint(weights, tmp_path, relative=True)
    _edit(ckpt / POST, lambda d: d["steps"][1]["config"].update(enabled=False))
    line = _refused(ckpt, robot_preset(tmp_path), capsys)
    assert line == f"error: {ckpt / POST}: absolute_actions_processor enabled=False but " \
                   f"{PRE}'s relative_actions_processor enabled=True"


def test_tokenizer_ids_beyond_the_embedding(weights: Path, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    from .test_tokenizer import paligemma_like

    ckpt = _checkpoint(weights, tmp_path)
    paligemma_like(ckpt / "tokenizer", 320)  # the model embeds 300
    line = _refused(ckpt, robot_preset(tmp_path), capsys)
    assert line == f"error: {ckpt / 'tokenizer' / 'tokenizer.json'}: vocab: token " \
                   "'<piece319>' (id 319) can appear in a prompt but the model embeds ids " \
                   "0..299"
