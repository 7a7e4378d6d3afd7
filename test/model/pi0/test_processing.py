"""π0 request preparation: images, cameras, prompt, state, statistics, output."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import pytest

from xinfer_ros.model.errors import CheckpointError, ImageError, InputError, StateError
from xinfer_ros.model.pi0.normalization import (
    FeatureStats,
    find_checkpoint_stats,
    normalizer_from_mapping,
)
from xinfer_ros.model.pi0.preset import resolve_pi0
from xinfer_ros.model.pi0.processing import Pi0Inputs, Pi0Processor
from xinfer_ros.model.pi0.tokenizer import encode_prompt, offline_tokenizer
from xinfer_ros.model.presets import load_model_preset

from .conftest import write_stats


@pytest.fixture(scope="module")
def processor() -> Pi0Processor:
    spec = resolve_pi0(load_model_preset("pi0-tiny"))[1]
    return Pi0Processor(spec, offline_tokenizer())


def _state(processor: Pi0Processor) -> np.ndarray:
    return np.linspace(-0.5, 0.5, processor.spec.state_dim)


def _prepare(processor: Pi0Processor, images: Any, state: Any = None, **kw: Any) -> Any:
    state = _state(processor) if state is None else state
    return processor.prepare(Pi0Inputs(images, "pick", state), **kw)


def test_images_of_any_size_are_letterboxed_to_the_model_input(processor: Pi0Processor) -> None:
    side = processor.spec.image_size
    wide = np.full((240, 640, 3), 255, np.uint8)   # 8:3, unlike the square input
    ok, png = cv2.imencode(".png", np.full((100, 100, 3), 40, np.uint8))
    assert ok
    prepared = _prepare(processor, [wide, png.tobytes(), np.zeros((7, 9, 3), np.uint8)])
    assert prepared.pixels.shape == (3, 3, side, side)
    first = prepared.pixels[0]
    # Black bars above and below the scaled-down white frame, in SigLIP units [-1, 1].
    assert first[:, 0].max() == -1.0 and first[:, -1].max() == -1.0
    assert first[:, side // 2].min() == 1.0
    assert np.allclose(prepared.pixels[1], 40 / 127.5 - 1.0)
    assert prepared.camera_mask == (True, True, True)


def test_missing_cameras_are_masked_and_left_out_of_the_prefix(processor: Pi0Processor) -> None:
    spec = processor.spec
    image = np.zeros((224, 224, 3), np.uint8)
    full = _prepare(processor, [image] * 3)
    one_missing = _prepare(processor, [image, None, image])
    short = _prepare(processor, [image])  # fewer entries than cameras
    assert one_missing.camera_mask == (True, False, True)
    assert short.camera_mask == (True, False, False)
    visual = lambda p: int((p.input_ids == spec.image_token_id).sum())  # noqa: E731
    assert visual(full) == 3 * spec.tokens_per_image
    assert visual(one_missing) == 2 * spec.tokens_per_image
    assert one_missing.pixels.shape[0] == 2 and short.pixels.shape[0] == 1
    with pytest.raises(ImageError, match="no camera image"):
        _prepare(processor, [None, None])
    with pytest.raises(ImageError, match="4 images for a model of 3 cameras"):
        _prepare(processor, [image] * 4)


@pytest.mark.parametrize(("image", "match"), [
    (np.zeros((32, 32, 3), np.float32), "dtype uint8"),
    (np.zeros((32, 32), np.uint8), "HxWx3"),
    (b"not an image", "could not be decoded"),
    ("camera.png", "numpy array or encoded bytes"),
])
def test_bad_images_are_refused_naming_the_camera(processor: Pi0Processor, image: Any,
                                                  match: str) -> None:
    with pytest.raises(ImageError, match=match) as info:
        _prepare(processor, [np.zeros((8, 8, 3), np.uint8), image])
    assert info.value.field == "images[1]"


def test_state_is_normalised_padded_and_checked(processor: Pi0Processor) -> None:
    spec = processor.spec
    raw = _state(processor)
    prepared = _prepare(processor, [np.zeros((8, 8, 3), np.uint8)], state=raw)
    assert prepared.state.shape == (spec.max_state_dim,) and prepared.state.dtype == np.float32
    expected = spec.normalizer.state.normalize(raw)
    np.testing.assert_allclose(prepared.state[:spec.state_dim], expected, rtol=1e-6)
    assert not prepared.state[spec.state_dim:].any()
    image = [np.zeros((8, 8, 3), np.uint8)]
    for bad, match in ((np.zeros(33), "exceed the model's max_state_dim 32"),
                       (np.zeros(9), "expected 14 values"),
                       (np.full(14, np.nan), "NaN"), (np.zeros((2, 7)), "vector"),
                       ("joints", "numeric")):
        with pytest.raises(StateError, match=match):
            _prepare(processor, image, state=bad)


def test_prompt_is_bos_instruction_newline_and_masked_padding() -> None:
    tok = offline_tokenizer()
    ids, mask = encode_prompt(tok, "grab", 10)
    assert ids[0] == tok.bos_token_id == 2
    assert tok.decode(ids[1:6]) == "grab\n"
    assert mask.tolist() == [1] * 6 + [0] * 4
    assert (ids[6:] == tok.pad_token_id).all()
    with pytest.raises(InputError, match="exceed the model's prompt length 10"):
        encode_prompt(tok, "a much longer instruction", 10)
    with pytest.raises(InputError, match="expected str"):
        encode_prompt(tok, 7, 10)  # type: ignore[arg-type]


def test_output_is_sliced_unnormalised_and_keeps_the_committed_prefix(
        processor: Pi0Processor) -> None:
    spec = processor.spec
    rng = np.random.default_rng(0)
    prev = rng.normal(size=(spec.chunk_size, spec.action_dim))
    prepared = _prepare(processor, [np.zeros((8, 8, 3), np.uint8)], prev_chunk=prev, d=5,
                        prev_shift=3)
    model_units = rng.normal(size=(1, spec.chunk_size, spec.max_action_dim))
    chunk = processor.postprocess(model_units, prepared.rtc)
    assert chunk.shape == (spec.chunk_size, spec.action_dim)
    np.testing.assert_array_equal(chunk[:5], prev[3:8])
    np.testing.assert_allclose(
        chunk[5:], spec.normalizer.action.unnormalize(model_units[0, 5:, :spec.action_dim]))
    # The aligned previous chunk reaches the model in model units.
    np.testing.assert_allclose(prepared.rtc.aligned_norm[:spec.chunk_size - 3],
                               spec.normalizer.action.normalize(prev[3:]), rtol=1e-5,
                               atol=1e-6)


@pytest.mark.parametrize("mode", ["mean_std", "quantiles"])
def test_normalisation_round_trips(mode: str) -> None:
    rng = np.random.default_rng(1)
    low, high = rng.normal(size=5), rng.uniform(0.5, 2.0, 5)
    if mode == "quantiles":
        high = low + high
    stats = FeatureStats(mode, low, high)  # type: ignore[arg-type]
    x = rng.normal(size=(4, 5))
    np.testing.assert_allclose(stats.unnormalize(stats.normalize(x)), x, atol=1e-9)
    if mode == "quantiles":
        np.testing.assert_allclose(stats.normalize(low), -1.0)
        np.testing.assert_allclose(stats.normalize(high), 1.0)


def test_each_source_applies_its_own_epsilon_on_a_constant_joint() -> None:
    from xinfer_ros.model.pi0.normalization import LEROBOT, OPENPI

    mean, std = np.array([0.5, 1.0]), np.array([0.0, 2.0])  # joint 0 never moved
    x, a = np.array([0.5 + 1e-7, 3.0]), np.array([[2.0, 2.0]])
    lerobot = FeatureStats("mean_std", mean, std, LEROBOT)
    openpi = FeatureStats("mean_std", mean, std, OPENPI)
    # lerobot: (x - mean) / (std + 1e-8), back a * std + mean (normalize_processor.py)
    np.testing.assert_allclose(lerobot.normalize(x), [1e-7 / 1e-8, 2.0 / (2.0 + 1e-8)])
    np.testing.assert_allclose(lerobot.unnormalize(a), [[0.5, 5.0]])
    # openpi: 1e-6 on both sides (transforms.py)
    np.testing.assert_allclose(openpi.normalize(x), [1e-7 / 1e-6, 2.0 / (2.0 + 1e-6)])
    np.testing.assert_allclose(openpi.unnormalize(a), [[0.5 + 2e-6, 5.0 + 2e-6]])
    q = {"q01": np.array([1.0, 0.0]), "q99": np.array([1.0, 4.0])}
    span = FeatureStats("quantiles", q["q01"], q["q99"], OPENPI)
    np.testing.assert_allclose(span.normalize(np.array([1.0, 2.0])),
                               [-1.0, 2.0 * 2.0 / (4.0 + 1e-6) - 1.0])
    same = FeatureStats("quantiles", q["q01"], q["q99"], LEROBOT)
    np.testing.assert_allclose(same.normalize(np.array([1.0, 2.0])), [-1.0, 0.0])


@pytest.mark.parametrize("layout", ["openpi", "lerobot", "openpi_asset"])
def test_checkpoint_statistics_are_found_in_either_layout(tmp_path: Path, layout: str) -> None:
    if layout == "openpi_asset":
        from xinfer_ros.model.pi0.checkpoint import write_openpi_stats

        write_openpi_stats(tmp_path, {"mean": [1.0, 2.0], "std": [3.0, 4.0]},
                           {"mean": [0.0, 0.0], "std": [1.0, 1.0]}, asset="aloha")
        found = find_checkpoint_stats(tmp_path)
        assert found is not None and found.source.endswith("assets/aloha/norm_stats.json")
        np.testing.assert_array_equal(found.state.high, [3.0, 4.0])
        return
    stats = write_stats(tmp_path, layout, dim=3)
    if layout == "lerobot":
        from xinfer_ros.model.pi0.lerobot_pipeline import read_lerobot_pipeline

        assert find_checkpoint_stats(tmp_path) is None  # not openpi's or transformers'
        pipeline = read_lerobot_pipeline(tmp_path, action_dim=3, state_dim=3)
        assert pipeline is not None
        found = pipeline.normalizer
    else:
        found = find_checkpoint_stats(tmp_path)
    assert found is not None
    np.testing.assert_allclose(found.action.low, stats["action"]["mean"], rtol=1e-6)
    found.check_dims(3, 3)
    with pytest.raises(CheckpointError, match="action statistics have 3 values"):
        found.check_dims(3, 4)


def test_malformed_statistics_fail_clearly(tmp_path: Path) -> None:
    (tmp_path / "norm_stats.json").write_text('{"norm_stats": {"state": {"mean": [0]}}}')
    with pytest.raises(CheckpointError, match="'state' and 'actions'"):
        find_checkpoint_stats(tmp_path)
    with pytest.raises(CheckpointError, match="needs mean and std"):
        normalizer_from_mapping({"mode": "mean_std", "state": {"mean": [0.0]},
                                 "action": {"mean": [0.0], "std": [1.0]}}, "preset x")
    with pytest.raises(CheckpointError, match="unknown normalisation mode"):
        normalizer_from_mapping({"mode": "minmax"}, "preset x")
    with pytest.raises(CheckpointError, match="NaN"):
        normalizer_from_mapping({"state": {"mean": [np.nan], "std": [1.0]},
                                 "action": {"mean": [0.0], "std": [1.0]}}, "preset x")


def test_prepared_requests_carry_no_torch(processor: Pi0Processor) -> None:
    prepared = _prepare(processor, [np.zeros((8, 8, 3), np.uint8)])
    for field in dataclasses.fields(prepared):
        value = getattr(prepared, field.name)
        assert type(value).__module__.split(".")[0] in ("numpy", "builtins"), field.name
