"""The shared request front end: previous chunks, commit lengths, engine inputs."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from xinfer_ros.core.constants import COMMIT_LENGTH
from xinfer_ros.model.errors import ChunkShapeError, CommitLengthError, InputError
from xinfer_ros.model.inputs import RequestInputs
from xinfer_ros.serving.frontend import (
    FlatChunk,
    commit_steps,
    engine_inputs,
    previous_chunk,
    request_inputs,
)

_NO_CHUNK = FlatChunk((), 0, 0)


def _inputs(positions: Sequence[float] = (0.1, 0.2), **overrides: object) -> RequestInputs:
    def observe() -> tuple[list[np.ndarray], Sequence[float]]:
        return [np.zeros((4, 4, 3), np.uint8)], positions

    args: dict[str, object] = {
        "robot": "arm1", "claimed_robot": "", "instruction": "pick", "observe": observe,
        "prev": _NO_CHUNK, "commit": 0, "action_shape": (4, 2), "seed": 7}
    args.update(overrides)
    return request_inputs(**args)  # type: ignore[arg-type]


def test_a_request_that_fails_its_own_checks_never_picks_an_observation() -> None:
    def observe() -> tuple[list[np.ndarray], list[float]]:
        raise AssertionError("observation picked for a malformed request")

    for bad in ({"claimed_robot": "arm2"}, {"prev": FlatChunk([0.0] * 7, 4, 2)},
                {"prev": FlatChunk([0.0] * 8, 4, 2), "commit": 9}):
        with pytest.raises((InputError, ChunkShapeError, CommitLengthError)):
            _inputs(observe=observe, **bad)


def test_request_inputs_reshape_a_flat_chunk_and_keep_its_commit() -> None:
    inputs = _inputs(prev=FlatChunk(list(range(8)), 4, 2), commit=3, claimed_robot="arm1")
    assert inputs.prev_chunk is not None
    assert inputs.prev_chunk.tolist() == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert inputs.commit == 3 and inputs.seed == 7
    assert inputs.state.dtype == np.float64 and inputs.state.tolist() == [0.1, 0.2]
    # Without a previous chunk nothing is committed, whatever the request said.
    assert _inputs(commit=3).prev_chunk is None and _inputs(commit=3).commit == 0


@pytest.mark.parametrize(("overrides", "error", "message"), [
    ({"claimed_robot": "arm2"}, InputError, "robot_id: 'arm2' does not match namespace /arm1"),
    ({"positions": [0.1, float("nan")]}, InputError, "joint_states: position contains NaN"),
    ({"prev": FlatChunk([0.0] * 7, 4, 2)}, ChunkShapeError, "7 values do not fill .* 4x2"),
    ({"prev": FlatChunk([0.0] * 8, 2, 4)}, ChunkShapeError, r"expected shape \(4, 2\)"),
    ({"prev": FlatChunk([float("inf")] * 8, 4, 2)}, ChunkShapeError, "NaN or Inf"),
    ({"prev": FlatChunk([0.0] * 8, 4, 2), "commit": 5}, CommitLengthError, "outside"),
])
def test_request_inputs_refuse_a_bad_request_naming_the_field(
        overrides: dict[str, object], error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        _inputs(**overrides)


def test_previous_chunk_accepts_the_model_shape_and_pads_a_narrow_layout() -> None:
    chunk = np.arange(16 * 14, dtype=float).reshape(16, 14)
    assert previous_chunk(chunk.tolist(), 16, 14) == pytest.approx(chunk)
    narrow = previous_chunk(np.ones((16, 7)), 16, 14, columns=7)
    assert narrow.shape == (16, 14) and narrow[:, :7].all() and not narrow[:, 7:].any()


@pytest.mark.parametrize(("values", "message"), [
    ("abc", "not a numeric array"),
    (np.ones((16, 7)), r"expected shape \(16, 14\), got \(16, 7\)"),
    (np.ones((8, 14)), "expected shape"),
    (np.ones(16 * 14), "expected shape"),
    (np.full((16, 14), np.nan), "NaN or Inf"),
])
def test_previous_chunk_names_the_field_on_bad_input(values: object, message: str) -> None:
    with pytest.raises(ChunkShapeError, match=message) as info:
        previous_chunk(values, 16, 14, field="xinfer/prev_chunk")
    assert info.value.field == "xinfer/prev_chunk"


def test_commit_steps_defaults_to_the_paper_and_is_bounded_by_the_horizon() -> None:
    assert commit_steps(None, 16) == COMMIT_LENGTH
    assert commit_steps(None, 4) == 4
    assert commit_steps(0, 16) == 0 and commit_steps(16, 16) == 16
    with pytest.raises(CommitLengthError, match=r"17 outside \[0, 16\]"):
        commit_steps(17, 16)
    with pytest.raises(CommitLengthError):
        commit_steps(-1, 16)


def test_engine_inputs_commit_nothing_without_a_previous_chunk() -> None:
    state = np.zeros(14)
    plain = engine_inputs([None], "pick", state, prev_chunk=None, commit=8, seed=3)
    assert plain.commit == 0 and plain.prev_chunk is None and plain.seed == 3
    prev = np.zeros((16, 14))
    rtc = engine_inputs([None], "pick", state, prev_chunk=prev, commit=8, seed=3)
    assert rtc.commit == 8 and rtc.prev_chunk is prev
    assert rtc.prev_shift == 0 and rtc.prev_dims is None and rtc.images == (None,)


def test_camera_image_passes_fits_or_refuses_other_sizes() -> None:
    from xinfer_ros.model.errors import ImageError
    from xinfer_ros.serving.frontend import camera_image

    frame = np.full((100, 100, 3), 90, np.uint8)
    assert camera_image(frame, 0, (100, 100), strict=True, resizes=False) is frame
    assert camera_image(frame, 0, (224, 352), strict=False, resizes=True) is frame
    boxed = camera_image(frame, 0, (224, 352), strict=False, resizes=False)
    assert boxed.shape == (224, 352, 3) and not boxed[:, :50].any()
    assert (boxed[:, 176] == 90).all()
    with pytest.raises(ImageError, match=r"camera_2: image is 100x100; the model takes 352x224"):
        camera_image(frame, 2, (224, 352), strict=True, resizes=False)


def _rtc_of(inputs: RequestInputs, horizon: int, dim: int) -> object:
    """The RTC inputs a model builds from the engine inputs (as every model's prepare)."""
    from xinfer_ros.model.rtc_inputs import build_rtc_inputs

    return build_rtc_inputs(inputs.prev_chunk, inputs.commit, horizon=horizon,
                            action_dim=dim, num_steps=4, beta=5.0, normalize=lambda a: a,
                            prev_shift=inputs.prev_shift)


def test_the_requests_shift_reaches_the_model_and_no_weight_lands_on_padding() -> None:
    horizon, dim, d, shift = 50, 2, 8, 20
    # The executor's aligned chunk: 30 planned rows, then its last command repeated.
    planned = np.arange(horizon * dim, dtype=np.float64).reshape(horizon, dim)
    planned[horizon - shift:] = planned[horizon - shift - 1]
    prev = FlatChunk(planned.ravel().tolist(), horizon, dim, shift)
    inputs = _inputs(prev=prev, commit=d, action_shape=(horizon, dim))
    assert inputs.prev_shift == shift
    rtc = _rtc_of(inputs, horizon, dim)
    weights = rtc.weights  # type: ignore[attr-defined]
    assert rtc.overlap == horizon - shift  # type: ignore[attr-defined]
    assert not weights[horizon - shift:].any()              # Eq. 5: 0 for i >= H - s
    assert np.all(weights[:d] == 1.0) and np.all(weights[d:horizon - shift] > 0)
    # Eq. 5 by hand on the overlap: c_i = (H - s - i) / (H - s - d + 1)
    i = np.arange(d, horizon - shift)
    c = (horizon - shift - i) / (horizon - shift - d + 1)
    np.testing.assert_allclose(weights[d:horizon - shift], c * np.expm1(c) / np.expm1(1.0),
                               rtol=1e-6)
    # Guidance targets the planned rows, unshifted (row i is the plan for tick send + i).
    np.testing.assert_array_equal(rtc.aligned_raw[:horizon - shift],  # type: ignore[attr-defined]
                                  planned[:horizon - shift])


def test_old_requests_without_a_shift_keep_the_whole_chunk() -> None:
    planned = np.ones((16, 2))
    inputs = _inputs(prev=FlatChunk(planned.ravel().tolist(), 16, 2), commit=8,
                     action_shape=(16, 2))
    assert inputs.prev_shift == 0
    assert _rtc_of(inputs, 16, 2).overlap == 16  # type: ignore[attr-defined]


def test_a_dry_queue_keeps_the_committed_prefix_pinned_to_the_held_command() -> None:
    # 3 planned rows, d = 8: the robot holds its last command for 5 committed ticks.
    horizon, dim, d = 16, 2, 8
    planned = np.zeros((horizon, dim))
    planned[:3] = [[1, 1], [2, 2], [3, 3]]
    planned[3:] = planned[2]
    inputs = _inputs(prev=FlatChunk(planned.ravel().tolist(), horizon, dim, horizon - 3),
                     commit=d, action_shape=(horizon, dim))
    assert inputs.prev_shift == horizon - d
    rtc = _rtc_of(inputs, horizon, dim)
    assert rtc.frozen == d and not rtc.weights[d:].any()  # type: ignore[attr-defined]
    np.testing.assert_array_equal(rtc.aligned_raw[:d], planned[:d])  # type: ignore[attr-defined]
    with pytest.raises(CommitLengthError, match="prev_shift: 17 outside"):
        _inputs(prev=FlatChunk(planned.ravel().tolist(), horizon, dim, 17), commit=d,
                action_shape=(horizon, dim))


def test_a_narrow_previous_chunk_is_padded_with_zeros_in_model_units() -> None:
    from xinfer_ros.model.rtc_inputs import build_rtc_inputs

    mean, std = np.arange(1.0, 5.0), np.full(4, 2.0)
    prev = previous_chunk(np.full((6, 2), 3.0), 6, 4, columns=2)
    inputs = engine_inputs([None], "pick", np.zeros(4), prev_chunk=prev, commit=2, seed=0,
                           prev_dims=2)
    assert inputs.prev_dims == 2
    rtc = build_rtc_inputs(inputs.prev_chunk, inputs.commit, horizon=6, action_dim=4,
                           num_steps=4, beta=5.0, normalize=lambda a: (a - mean) / std,
                           prev_dims=inputs.prev_dims)
    assert rtc is not None
    np.testing.assert_allclose(rtc.aligned_norm[:, :2], np.tile((3.0 - mean[:2]) / std[:2], (6, 1)))
    assert not rtc.aligned_norm[:, 2:].any()  # not (0 - mean) / std = -1.5, -2
    # A full-width chunk has nothing to mark.
    assert engine_inputs([None], "pick", np.zeros(4), prev_chunk=prev, commit=2, seed=0,
                         prev_dims=4).prev_dims is None
