"""save_pretrained / from_pretrained round trip (safetensors + config json)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path

    from xinfer_ros.model.config import VLAConfig
    from xinfer_ros.model.synthetic import SyntheticInputs
    from xinfer_ros.model.vla import ReferenceVLA

import json

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from xinfer_ros.model import stages  # noqa: E402
from xinfer_ros.model.config import VLAConfig  # noqa: E402
from xinfer_ros.model.vla import CONFIG_FILE, WEIGHTS_FILE, ReferenceVLA  # noqa: E402

from .helpers import request_state  # noqa: E402

pytestmark = pytest.mark.torch


def _actions(model: ReferenceVLA, inputs: SyntheticInputs) -> torch.Tensor:
    req = request_state(model, inputs, prev_chunk=inputs.prev_chunk, d=8, prev_shift=4, seed=9)
    return stages.run_request(model, req)


def test_round_trip_identical(
    tiny_model: ReferenceVLA, raw_inputs: SyntheticInputs, tmp_path: Path
) -> None:
    out = tiny_model.save_pretrained(tmp_path / "ckpt")
    assert (out / WEIGHTS_FILE).is_file()
    saved = json.loads((out / CONFIG_FILE).read_text())
    assert VLAConfig.from_dict(saved) == tiny_model.config
    loaded = ReferenceVLA.from_pretrained(out)
    ref_state = tiny_model.state_dict()
    new_state = loaded.state_dict()
    assert ref_state.keys() == new_state.keys()
    for key, value in ref_state.items():
        assert torch.equal(value, new_state[key]), key
    for name, buf in loaded.named_buffers():
        assert not buf.is_meta, name
    assert torch.equal(_actions(tiny_model, raw_inputs), _actions(loaded, raw_inputs))


def test_loaded_weights_not_reseeded(
    tiny_config: VLAConfig, raw_inputs: SyntheticInputs, tmp_path: Path
) -> None:
    other = ReferenceVLA.build(tiny_config, seed=123)
    other.save_pretrained(tmp_path)
    loaded = ReferenceVLA.from_pretrained(tmp_path)
    assert torch.equal(_actions(other, raw_inputs), _actions(loaded, raw_inputs))


def test_missing_checkpoint_files(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=CONFIG_FILE):
        ReferenceVLA.from_pretrained(tmp_path)
