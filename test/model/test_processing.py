"""CPU preparation and output processing: validation, resizing, binning, tokens."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from xinfer_ros.model.config import VLAConfig
    from xinfer_ros.model.synthetic import SyntheticInputs

import subprocess
import sys

import cv2
import numpy as np
import pytest

from xinfer_ros.model.errors import (
    ChunkShapeError,
    CommitLengthError,
    ImageError,
    InputError,
    StateError,
)
from xinfer_ros.model.processing import (
    PreparedRequest,
    discretize_state,
    postprocess_actions,
    prepare_request,
)
from xinfer_ros.model.tokenizer import ByteTokenizer


def _prepare(config: VLAConfig, inputs: SyntheticInputs, **overrides: Any) -> PreparedRequest:
    kwargs = {
        "images": inputs.images,
        "instruction": inputs.instruction,
        "state": inputs.state,
        "prev_chunk": inputs.prev_chunk,
        "d": 8,
        "prev_shift": 4,
    }
    kwargs.update(overrides)
    images = kwargs.pop("images")
    instruction = kwargs.pop("instruction")
    state = kwargs.pop("state")
    return prepare_request(
        config, ByteTokenizer(config.action.state_bins), images, instruction, state, **kwargs
    )


def test_prepare_shapes_and_groups(tiny_config: VLAConfig, raw_inputs: SyntheticInputs) -> None:
    prepared = _prepare(tiny_config, raw_inputs)
    groups = prepared.pixel_groups
    # 224x352 alone, the two 224x320 cameras batched together
    assert [g[0] for g in groups] == [(0,), (1, 2)]
    assert groups[0][1].shape == (1, 3, 224, 352)
    assert groups[1][1].shape == (2, 3, 224, 320)
    assert groups[1][1].dtype == np.float32
    assert groups[1][1].min() >= -1.0 and groups[1][1].max() <= 1.0
    # pixel 0 -> -1, 255 -> +1 (SigLIP normalisation), channel-first
    img = raw_inputs.images[1]
    np.testing.assert_allclose(groups[1][1][0, :, 5, 7], img[5, 7] / 127.5 - 1, rtol=1e-6)
    assert tiny_config.num_visual_tokens == 217


def test_token_layout(tiny_config: VLAConfig, raw_inputs: SyntheticInputs) -> None:
    tok = ByteTokenizer(256)
    prepared = _prepare(tiny_config, raw_inputs)
    ids = prepared.token_ids.tolist()
    assert ids[0] == tok.BOS
    assert ids[-1] == tok.ACTION
    begin = ids.index(tok.STATE_BEGIN)
    end = ids.index(tok.STATE_END)
    assert end - begin - 1 == tiny_config.action.state_pad_dim
    # zero state -> middle bin 128 for every dim
    assert ids[begin + 1 : end] == [tok.state_offset + 128] * tiny_config.action.state_pad_dim
    text = tok.decode(ids)
    assert raw_inputs.instruction in text
    assert max(ids) < tiny_config.backbone.vocab_size


def test_discretize_state_bins(tiny_config: VLAConfig) -> None:
    state = np.zeros(14)
    state[0], state[1], state[2] = -1.0, 1.0, 5.0  # 5.0 clips to +1
    bins = discretize_state(state, tiny_config)
    assert bins.dtype == np.int64
    assert bins[0] == 0
    assert bins[1] == 255
    assert bins[2] == 255
    assert bins[3] == 128


def test_resize_and_encoded_images(tiny_config: VLAConfig, raw_inputs: SyntheticInputs) -> None:
    big = [cv2.resize(im, (im.shape[1] * 2, im.shape[0] * 2)) for im in raw_inputs.images]
    prepared = _prepare(tiny_config, raw_inputs, images=big)
    assert prepared.pixel_groups[0][1].shape == (1, 3, 224, 352)
    ok, png = cv2.imencode(".png", cv2.cvtColor(raw_inputs.images[0], cv2.COLOR_RGB2BGR))
    assert ok
    encoded = [png.tobytes(), *raw_inputs.images[1:]]
    from_bytes = _prepare(tiny_config, raw_inputs, images=encoded)
    direct = _prepare(tiny_config, raw_inputs)
    np.testing.assert_array_equal(from_bytes.pixel_groups[0][1], direct.pixel_groups[0][1])


@pytest.mark.parametrize(
    ("mutate", "field", "exc"),
    [
        (lambda ims: [ims[0][:, :200], *ims[1:]], "images[0]", ImageError),  # wrong size
        (lambda ims: [ims[0], ims[1][..., :1], ims[2]], "images[1]", ImageError),  # 1 channel
        (
            lambda ims: [ims[0], ims[1], np.dstack([ims[2], ims[2][..., :1]])],
            "images[2]",
            ImageError,
        ),  # 4 channels
        (lambda ims: [ims[0].astype(np.float32), *ims[1:]], "images[0]", ImageError),  # dtype
        (lambda ims: [ims[0][..., 0], *ims[1:]], "images[0]", ImageError),  # grayscale 2-D
        (lambda ims: ims[:2], "images", ImageError),  # missing camera
        (lambda ims: [b"not an image", *ims[1:]], "images[0]", ImageError),  # undecodable
    ],
)
def test_bad_images(
    tiny_config: VLAConfig,
    raw_inputs: SyntheticInputs,
    mutate: Callable[[list[np.ndarray]], list[Any]],
    field: str,
    exc: type[Exception],
) -> None:
    with pytest.raises(exc) as info:
        _prepare(tiny_config, raw_inputs, images=mutate(raw_inputs.images))
    assert info.value.field == field
    assert field in str(info.value)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_state(tiny_config: VLAConfig, raw_inputs: SyntheticInputs, bad: float) -> None:
    state = np.zeros(14)
    state[3] = bad
    with pytest.raises(StateError) as info:
        _prepare(tiny_config, raw_inputs, state=state)
    assert info.value.field == "state"
    with pytest.raises(StateError, match="state"):
        _prepare(tiny_config, raw_inputs, state=np.zeros(13))


@pytest.mark.parametrize("shape", [(15, 14), (16, 13), (16,), (1, 16, 14)])
def test_bad_previous_chunk_shape(
    tiny_config: VLAConfig, raw_inputs: SyntheticInputs, shape: tuple[int, ...]
) -> None:
    with pytest.raises(ChunkShapeError) as info:
        _prepare(tiny_config, raw_inputs, prev_chunk=np.zeros(shape))
    assert info.value.field == "prev_chunk"


def test_non_finite_previous_chunk(tiny_config: VLAConfig, raw_inputs: SyntheticInputs) -> None:
    prev = raw_inputs.prev_chunk.copy()
    prev[2, 2] = np.nan
    with pytest.raises(ChunkShapeError, match="prev_chunk"):
        _prepare(tiny_config, raw_inputs, prev_chunk=prev)


@pytest.mark.parametrize(("d", "shift"), [(17, 0), (-1, 0), (13, 4), (2.5, 0)])
def test_bad_commit_length(
    tiny_config: VLAConfig, raw_inputs: SyntheticInputs, d: float, shift: int
) -> None:
    with pytest.raises(CommitLengthError) as info:
        _prepare(tiny_config, raw_inputs, d=d, prev_shift=shift)
    assert info.value.field == "d"


def test_bad_shift_and_mode(tiny_config: VLAConfig, raw_inputs: SyntheticInputs) -> None:
    with pytest.raises(CommitLengthError) as info:
        _prepare(tiny_config, raw_inputs, d=0, prev_shift=20)
    assert info.value.field == "prev_shift"
    with pytest.raises(CommitLengthError, match="prev_shift"):
        _prepare(tiny_config, raw_inputs, d=0, prev_shift=1.5)
    with pytest.raises(InputError) as info2:
        _prepare(tiny_config, raw_inputs, rtc_mode="medium")
    assert info2.value.field == "rtc_mode"
    with pytest.raises(InputError, match="instruction"):
        _prepare(tiny_config, raw_inputs, instruction=None)


def test_d_checked_without_previous_chunk(
    tiny_config: VLAConfig, raw_inputs: SyntheticInputs
) -> None:
    with pytest.raises(CommitLengthError, match="d"):
        _prepare(tiny_config, raw_inputs, prev_chunk=None, d=99)
    assert _prepare(tiny_config, raw_inputs, prev_chunk=None, d=8).rtc is None


def test_rtc_inputs_alignment(tiny_config: VLAConfig, raw_inputs: SyntheticInputs) -> None:
    prepared = _prepare(tiny_config, raw_inputs, d=5, prev_shift=4)
    rtc = prepared.rtc
    assert rtc is not None
    assert rtc.overlap == 12
    np.testing.assert_array_equal(rtc.aligned_raw[:12], raw_inputs.prev_chunk[4:])
    np.testing.assert_array_equal(rtc.weights[:5], 1.0)
    np.testing.assert_array_equal(rtc.weights[12:], 0.0)
    assert rtc.step_weights.shape == (tiny_config.action.num_steps,)


def test_postprocess_unnormalises_and_freezes(
    tiny_config: VLAConfig, raw_inputs: SyntheticInputs
) -> None:
    norm = {
        "action_mean": tuple(float(i) for i in range(14)),
        "action_std": tuple(2.0 for _ in range(14)),
    }
    from xinfer_ros.model.config import NormStats

    config = tiny_config.replace(norm=NormStats(**norm))
    prepared = _prepare(config, raw_inputs, d=3, prev_shift=0)
    actions = np.ones((1, 16, 14), dtype=np.float32)
    out = postprocess_actions(actions, config, prepared.rtc)
    assert out.shape == (16, 14)
    np.testing.assert_array_equal(out[:3], raw_inputs.prev_chunk[:3])
    np.testing.assert_allclose(out[3:], 1.0 * 2.0 + np.arange(14)[None, :].repeat(13, 0))


def test_processing_imports_without_torch() -> None:
    code = (
        "import sys, xinfer_ros.model.processing, xinfer_ros.model.config; "
        "sys.exit(1 if 'torch' in sys.modules else 0)"
    )
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0
