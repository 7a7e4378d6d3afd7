from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from xinfer_ros.openpi.layouts import (
    ALOHA,
    LIBERO,
    ModelSpec,
    ObservationFieldError,
    ObservationLayout,
    fit_image,
    load_layout,
    map_observation,
    to_rgb_uint8,
)
from xinfer_ros.openpi.options import parse_options
from xinfer_ros.openpi.transforms import IDENTITY_TRANSFORMS

MODEL = ModelSpec.from_preset("tiny")  # cameras 224x352, 224x320, 224x320


def libero_obs(**over: object) -> dict[str, object]:
    obs: dict[str, object] = {
        "observation/image": np.full((224, 224, 3), 200, np.uint8),
        "observation/wrist_image": np.full((256, 256, 3), 100, np.uint8),
        "observation/state": np.arange(8, dtype=np.float64),
        "prompt": "put the bowl on the plate"}
    obs.update(over)
    return obs


def aloha_obs(**over: object) -> dict[str, object]:
    obs: dict[str, object] = {
        "images": {"cam_high": np.full((3, 224, 224), 50, np.uint8),        # CHW
                   "cam_left_wrist": np.full((480, 640, 3), 0.5, np.float32),  # HWC float
                   "cam_low": np.zeros((3, 224, 224), np.uint8)},            # not used
        "state": np.linspace(-1, 1, 14), "prompt": "fold"}
    obs.update(over)
    return obs


def test_libero_maps_cameras_state_prompt_and_masks_the_third_camera() -> None:
    m = map_observation(libero_obs(), LIBERO, MODEL)
    assert m.layout == "libero"
    assert [im.shape for im in m.images] == [(224, 352, 3), (224, 320, 3), (224, 320, 3)]
    assert all(im.dtype == np.uint8 for im in m.images)
    assert m.image_mask == (True, True, False)
    assert not m.images[2].any()                       # masked camera: zero image
    # pad keeps the aspect ratio: the 224x224 image sits centred on black columns
    assert m.images[0][:, 64:288].min() == 200 and not m.images[0][:, :64].any()
    np.testing.assert_array_equal(m.state[:8], np.arange(8))
    assert m.state.shape == (14,) and not m.state[8:].any() and m.state_dim_in == 8
    assert m.prompt == "put the bowl on the plate"


def test_aloha_chw_float_images_and_missing_wrist_is_masked() -> None:
    m = map_observation(aloha_obs(), ALOHA, MODEL)
    assert m.image_mask == (True, True, False)
    assert m.images[0].shape == (224, 352, 3) and m.images[0].max() == 50
    assert m.images[1].shape == (224, 320, 3)
    assert abs(int(m.images[1][112, 160, 0]) - 128) <= 1   # 0.5 * 255
    # adapt_to_pi: joints 1, 2, 8, 9 change sign, the others stay (grippers: see
    # test_transforms.py)
    sent = np.linspace(-1, 1, 14)
    keep, flip = [0, 3, 4, 5, 7, 10, 11, 12], [1, 2, 8, 9]
    np.testing.assert_allclose(m.state[keep], sent[keep])
    np.testing.assert_allclose(m.state[flip], -sent[flip])


def test_auto_detects_builtin_layouts_and_accepts_flat_or_nested_keys() -> None:
    assert map_observation(libero_obs(), None, MODEL).layout == "libero"
    assert map_observation(aloha_obs(), None, MODEL).layout == "aloha"
    nested = {"observation": {"image": np.zeros((224, 224, 3), np.uint8),
                              "wrist_image": np.zeros((224, 224, 3), np.uint8),
                              "state": np.zeros(8)}, "prompt": "x"}
    assert map_observation(nested, None, MODEL).image_mask == (True, True, False)
    flat_aloha = {"images/cam_high": np.zeros((224, 224, 3), np.uint8), "state": np.zeros(14),
                  "prompt": "x"}
    assert map_observation(flat_aloha, None, MODEL).layout == "aloha"


@pytest.mark.parametrize(("obs", "field"), [
    (libero_obs(**{"observation/state": np.zeros(20)}), "observation/state"),
    (libero_obs(**{"observation/state": np.array([np.nan] * 8)}), "observation/state"),
    (libero_obs(**{"observation/state": "abc"}), "observation/state"),
    (libero_obs(**{"observation/state": np.zeros((2, 4))}), "observation/state"),
    (libero_obs(**{"observation/image": np.zeros((224, 224), np.uint8)}), "observation/image"),
    (libero_obs(**{"observation/image": np.zeros((224, 224, 4), np.uint8)}),
     "observation/image"),
    (libero_obs(**{"observation/image": np.zeros((224, 224, 3), np.int32)}),
     "observation/image"),
    (libero_obs(**{"observation/image": [1, 2, 3]}), "observation/image"),
    (libero_obs(**{"prompt": 5}), "prompt"),
    ({k: v for k, v in libero_obs().items() if k != "observation/wrist_image"},
     "observation/wrist_image"),
    ({k: v for k, v in libero_obs().items() if k != "prompt"}, "prompt"),
    ({"something": 1}, "observation"),
    ([1, 2], "observation"),
])
def test_malformed_or_missing_fields_name_the_field(obs: object, field: str) -> None:
    with pytest.raises(ObservationFieldError) as info:
        map_observation(obs, None, MODEL)
    assert info.value.field == field
    assert str(info.value).startswith(field)


def test_default_prompt_and_optional_state() -> None:
    obs = {k: v for k, v in libero_obs().items() if k != "prompt"}
    assert map_observation(obs, LIBERO, MODEL, default_prompt="go").prompt == "go"
    layout = ObservationLayout("cam_only", LIBERO.cameras, "nope", state_required=False,
                               transforms=IDENTITY_TRANSFORMS)
    m = map_observation(libero_obs(), layout, MODEL)
    assert m.state_dim_in == 0 and not m.state.any()


def test_custom_layout_from_yaml(tmp_path: Path) -> None:
    path = tmp_path / "arm.yaml"
    path.write_text("name: arm\ncameras:\n  - {key: obs/front, required: true}\n"
                    "  - obs/wrist\nstate_key: obs/joints\nprompt_key: task\n"
                    "action_dim: 6\nresize: stretch\ntransforms: {adapt_to_pi: false, "
                    "delta_action_mask: [], clean_prompt: false}\n")
    layout = load_layout(str(path))
    assert layout is not None and layout.action_dim == 6 and layout.resize == "stretch"
    obs = {"obs": {"front": np.full((100, 100, 3), 9, np.uint8), "joints": [0.1, 0.2]},
           "task": "wave"}
    m = map_observation(obs, layout, MODEL)
    assert m.image_mask == (True, False, False)
    assert m.images[0].min() == 9                      # stretched: no black padding
    assert load_layout("auto") is None and load_layout("aloha") is ALOHA
    with pytest.raises(ValueError, match="unknown layout"):
        load_layout("no-such-layout")


def test_fit_image_pad_geometry() -> None:
    out = fit_image(np.full((100, 200, 3), 255, np.uint8), 224, 320, "pad")
    assert out.shape == (224, 320, 3)
    assert out[32:192, 0].all() and not out[:32].any() and not out[-32:].any()  # 160 rows centred
    same = np.zeros((224, 320, 3), np.uint8)
    assert fit_image(same, 224, 320) is same


def test_to_rgb_uint8_clips_float_images() -> None:
    out = to_rgb_uint8(np.array([[[-0.5, 0.5, 2.0]]], dtype=np.float64), "img")
    assert out.tolist() == [[[0, 128, 255]]]


def test_options_defaults_and_overrides() -> None:
    kw = {"default_budget_ms": 180.0, "max_budget_ms": 1000.0, "horizon": 16,
          "action_dim": 14, "out_dim": 7}
    o = parse_options({}, **kw)
    assert (o.robot_id, o.budget, o.prev_chunk, o.commit_steps, o.seed) == \
        (None, 0.180, None, 0, None)
    o = parse_options({"xinfer/budget_ms": 90, "xinfer/robot_id": "arm-1",
                       "xinfer/prev_chunk": np.ones((16, 7)), "xinfer/seed": 3}, **kw)
    assert o.budget == 0.090 and o.budget_ms == 90.0 and o.robot_id == "arm-1" and o.seed == 3
    assert o.prev_chunk.shape == (16, 14) and o.prev_chunk[:, 7:].sum() == 0
    assert o.commit_steps == 8
    o = parse_options({"xinfer": {"prev_chunk": np.ones((16, 14)), "commit_steps": 4}}, **kw)
    assert o.commit_steps == 4 and o.prev_chunk.shape == (16, 14)


@pytest.mark.parametrize("obs", [
    {"xinfer/budget_ms": 0}, {"xinfer/budget_ms": 5000}, {"xinfer/budget_ms": "fast"},
    {"xinfer/budget_ms": True}, {"xinfer/robot_id": ""}, {"xinfer/robot_id": "a b"},
    {"xinfer/robot_id": 7}, {"xinfer/prev_chunk": np.ones((8, 14))},
    {"xinfer/prev_chunk": np.ones((16, 14)), "xinfer/commit_steps": 17},
    {"xinfer/prev_chunk": np.ones((16, 14)), "xinfer/commit_steps": 2.5},
    {"xinfer/commit_steps": "x"},
    {"xinfer/seed": -1},
])
def test_options_reject_bad_values(obs: dict[str, object]) -> None:
    with pytest.raises(ObservationFieldError) as info:
        parse_options(obs, default_budget_ms=180.0, max_budget_ms=1000.0, horizon=16,
                      action_dim=14, out_dim=7)
    assert info.value.field.startswith("xinfer/")
    # The field is named once, as the client wrote it.
    field = info.value.field
    detail = str(info.value).removeprefix(f"{field}: ")
    assert not detail.startswith(field.rsplit("/", 1)[-1]), str(info.value)


def test_prev_shift_option_is_validated_and_only_kept_with_a_chunk() -> None:
    kwargs = {"default_budget_ms": 100.0, "max_budget_ms": 1000.0, "horizon": 16,
              "action_dim": 14, "out_dim": 7}
    chunk = np.zeros((16, 7))
    opts = parse_options({"xinfer/prev_chunk": chunk, "xinfer/prev_shift": 5}, **kwargs)
    assert opts.prev_shift == 5
    assert parse_options({"xinfer/prev_shift": 5}, **kwargs).prev_shift == 0
    with pytest.raises(ObservationFieldError) as info:
        parse_options({"xinfer/prev_chunk": chunk, "xinfer/prev_shift": 17}, **kwargs)
    assert info.value.field == "xinfer/prev_shift"
