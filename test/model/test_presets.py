"""Preset files parse; large presets have the expected sizes (meta device, no weights)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path

import numpy as np
import pytest

from xinfer_ros.model.config import VLAConfig, available_presets, load_preset
from xinfer_ros.model.presets import FAMILY_REGISTRY, load_model_preset, model_io, preset_family


def test_presets_present_and_parse() -> None:
    assert {"tiny", "vla-2b", "pi05"} <= set(available_presets())
    for name in ("tiny", "vla-2b", "pi05"):
        config = load_preset(name)
        assert config.name == name
        assert config.num_visual_tokens == 217
        assert config.action.horizon == 16
        assert config.action.action_dim == 14
        assert config.action.num_steps == 10
        assert VLAConfig.from_dict(config.to_dict()) == config


def test_every_shipped_preset_goes_through_its_family() -> None:
    """Each preset names a registered family, whose loader and IO answer for it."""
    assert set(FAMILY_REGISTRY) == {"reference", "pi0"}
    for name in available_presets():
        family = preset_family(name)
        assert family in FAMILY_REGISTRY
        io = model_io(name)
        assert (io.name, io.family) == (name, family)
        assert getattr(load_model_preset(name), "name", None) == name
    assert isinstance(load_model_preset("tiny"), VLAConfig)


def test_unknown_family_names_the_known_ones(tmp_path: Path) -> None:
    path = tmp_path / "odd.yaml"
    path.write_text("name: odd\nfamily: diffusion\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"unknown family 'diffusion'; known: \['reference', "
                                         r"'pi0'\]"):
        model_io(path)


def test_pi05_layout() -> None:
    config = load_preset("pi05")
    assert config.vision.patch_size == 14
    assert config.vision.merge == "avg_pool"
    assert config.visual_tokens_per_camera == (77, 70, 70)
    assert config.action.state_pad_dim == 32


def test_bad_preset_rejected(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="tiny"):
        load_preset("no-such-preset")
    data = load_preset("tiny").to_dict()
    data["cameras"][0]["width"] = 350  # not a multiple of 32
    with pytest.raises(ValueError, match="camera_0"):
        VLAConfig.from_dict(data)
    data = load_preset("tiny").to_dict()
    data["surprise"] = 1
    with pytest.raises(ValueError, match="surprise"):
        VLAConfig.from_dict(data)


@pytest.mark.torch
@pytest.mark.parametrize(
    ("name", "ranges"),
    [
        (
            "vla-2b",
            {"vit": (0.25e9, 0.45e9), "prefill": (1.5e9, 2.5e9), "action": (0.3e9, 0.6e9)},
        ),
        (
            "pi05",
            {"vit": (0.35e9, 0.45e9), "prefill": (2.2e9, 2.8e9), "action": (0.25e9, 0.35e9)},
        ),
    ],
)
def test_large_preset_parameter_counts(name: str, ranges: dict[str, tuple[float, float]]) -> None:
    pytest.importorskip("torch")
    from xinfer_ros.model.vla import ReferenceVLA

    model = ReferenceVLA.build(load_preset(name), device="meta")
    counts = model.num_parameters_by_stage()
    for stage, (low, high) in ranges.items():
        assert low <= counts[stage] <= high, (stage, counts[stage])


@pytest.mark.parametrize(("name", "prefix"), [("vla-2b", 446), ("pi05", 395)])
def test_prefix_length_matches_paper_table1(name: str, prefix: int) -> None:
    from xinfer_ros.model.processing import discretize_state
    from xinfer_ros.model.synthetic import DEFAULT_INSTRUCTION
    from xinfer_ros.model.tokenizer import ByteTokenizer

    config = load_preset(name)
    bins = discretize_state(np.zeros(config.action.state_dim), config)
    ids = ByteTokenizer(config.action.state_bins).build_prompt(
        config.prompt_template, DEFAULT_INSTRUCTION, bins, config.action.state_format
    )
    assert config.num_visual_tokens + len(ids) == prefix


def test_state_as_text_format() -> None:
    from xinfer_ros.model.tokenizer import ByteTokenizer

    tok = ByteTokenizer(256)
    ids = tok.build_prompt("T {instruction}", "go", np.array([0, 128, 255]), "text")
    assert tok.decode(ids) == "T go0 128 255"
    assert ids[-1] == tok.ACTION
    with pytest.raises(ValueError, match="state_format"):
        tok.build_prompt("{instruction}", "go", np.array([1]), "binary")
    with pytest.raises(ValueError, match="state bins"):
        tok.build_prompt("{instruction}", "go", np.array([256]), "text")
