"""openpi's data transforms per layout, against openpi's published formulas by hand.

Expected values are written out here from openpi's ``aloha_policy`` (joint flip mask,
``_gripper_to_angular``, ``_gripper_from_angular``) and ``transforms`` (``DeltaActions``
/ ``AbsoluteActions`` with ``make_bool_mask``), not taken from the code under test.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from xinfer_ros.openpi.layouts import (
    ALOHA,
    ALOHA_ABSOLUTE,
    BUILTIN_LAYOUTS,
    LIBERO,
    LIBERO_ABSOLUTE,
    ModelSpec,
    load_layout,
    map_observation,
)

FLIP = np.array([1, -1, -1, 1, 1, 1, 1, 1, -1, -1, 1, 1, 1, 1], dtype=np.float64)


def hand_gripper_to_angular(v: np.ndarray) -> np.ndarray:
    linear = v * (0.05800 - 0.01844) + 0.01844
    angle = np.arcsin(np.clip((0.022**2 + linear**2 - 0.036**2) / (2 * 0.022 * linear), -1, 1))
    return (angle - 0.5476) / (1.6296 - 0.5476)


def hand_gripper_from_angular(v: np.ndarray) -> np.ndarray:
    return (v + 0.5476 - -0.6213) / (1.4910 - -0.6213)


def hand_aloha_state(state: np.ndarray) -> np.ndarray:
    out = state * FLIP
    out[[6, 13]] = hand_gripper_to_angular(out[[6, 13]])
    return out


def hand_aloha_actions(model_actions: np.ndarray, model_state: np.ndarray,
                       delta: bool) -> np.ndarray:
    """openpi's ALOHA output pipeline on unnormalised model actions."""
    mask = np.array(([True] * 6 + [False]) * 2)  # make_bool_mask(6, -1, 6, -1)
    out = model_actions[:, :14].copy()
    if delta:
        out += np.where(mask, model_state[:14], 0.0)
    out = out * FLIP
    out[:, [6, 13]] = hand_gripper_from_angular(out[:, [6, 13]])
    return out


def test_builtin_layouts_follow_openpis_training_configs() -> None:
    assert LIBERO.transforms is not None and ALOHA.transforms is not None
    assert LIBERO.transforms.delta_action_mask == (True,) * 6 + (False,)
    assert not LIBERO.transforms.adapt_to_pi
    assert ALOHA.transforms.adapt_to_pi
    assert ALOHA.transforms.delta_action_mask == ((True,) * 6 + (False,)) * 2
    assert LIBERO_ABSOLUTE.transforms is not None and ALOHA_ABSOLUTE.transforms is not None
    assert LIBERO_ABSOLUTE.transforms.delta_action_mask == ()
    assert ALOHA_ABSOLUTE.transforms.adapt_to_pi
    assert ALOHA_ABSOLUTE.transforms.delta_action_mask == ()
    assert BUILTIN_LAYOUTS["pi0_aloha"] is ALOHA and BUILTIN_LAYOUTS["pi0_libero"] is LIBERO
    for layout in BUILTIN_LAYOUTS.values():
        assert layout.transforms is not None and layout.transforms.clean_prompt


def test_aloha_state_is_flipped_and_its_grippers_converted() -> None:
    model = ModelSpec((("cam", 8, 8),), state_dim=16, horizon=4, action_dim=16)
    state = np.linspace(-0.9, 0.9, 14)
    state[[6, 13]] = [0.3, 0.8]  # ALOHA's normalised gripper positions
    obs = {"images": {"cam_high": np.zeros((8, 8, 3), np.uint8)}, "state": state,
           "prompt": "  fold_the\ntowel "}
    m = map_observation(obs, ALOHA, model)
    np.testing.assert_allclose(m.state[:14], hand_aloha_state(state), rtol=0, atol=1e-12)
    assert not m.state[14:].any()
    assert m.prompt == "fold the towel"  # openpi: strip, "_" and newlines to spaces


@pytest.mark.parametrize("layout,delta", [(ALOHA, True), (ALOHA_ABSOLUTE, False)])
def test_aloha_reply_adds_the_state_back_then_converts(layout: object, delta: bool) -> None:
    rng = np.random.default_rng(0)
    transforms = layout.transforms  # type: ignore[attr-defined]
    model_state = np.concatenate([rng.normal(size=14), np.zeros(2)])
    model_actions = rng.normal(size=(5, 16))
    got = transforms.actions_out(model_actions, model_state, 14)
    np.testing.assert_allclose(got, hand_aloha_actions(model_actions, model_state, delta),
                               rtol=0, atol=1e-12)
    # A previous chunk goes the other way exactly (RTC compares in the model's frame).
    back = transforms.actions_in(got, model_state)
    np.testing.assert_allclose(back, model_actions[:, :14], rtol=0, atol=1e-12)


def test_libero_delta_on_the_first_six_dimensions_only() -> None:
    transforms = LIBERO.transforms
    assert transforms is not None
    state = np.arange(1.0, 9.0)  # LIBERO's 8 state values
    model_actions = np.full((3, 7), 0.5)
    got = transforms.actions_out(model_actions, state, 7)
    expected = model_actions.copy()
    expected[:, :6] += state[:6]  # make_bool_mask(6, -1): the gripper (6) stays absolute
    np.testing.assert_array_equal(got, expected)
    absolute = LIBERO_ABSOLUTE.transforms
    assert absolute is not None
    np.testing.assert_array_equal(absolute.actions_out(model_actions, state, 7), model_actions)


def _layout_file(tmp_path: Path, transforms: object, action_dim: int = 7) -> Path:
    path = tmp_path / "arm.json"
    data: dict[str, object] = {"name": "arm", "cameras": ["obs/front"], "state_key": "obs/q",
                               "action_dim": action_dim}
    if transforms is not None:
        data["transforms"] = transforms
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize("transforms,field", [
    (None, "transforms"),
    ({"adapt_to_pi": False, "delta_action_mask": []}, "transforms.clean_prompt"),
    ({"adapt_to_pi": False, "delta_action_mask": [], "clean_prompt": True, "flip": 1},
     "transforms.flip"),
    ({"adapt_to_pi": "yes", "delta_action_mask": [], "clean_prompt": True},
     "transforms.adapt_to_pi"),
    ({"adapt_to_pi": False, "delta_action_mask": [6, -1], "clean_prompt": True},
     "transforms.delta_action_mask"),
    ({"adapt_to_pi": True, "delta_action_mask": [], "clean_prompt": True},
     "transforms.adapt_to_pi"),  # ALOHA's conversion on a 7-wide layout
    ({"adapt_to_pi": False, "delta_action_mask": [True] * 8, "clean_prompt": True},
     "transforms.delta_action_mask"),  # wider than the actions
])
def test_a_layout_file_without_understood_transforms_is_refused(
        tmp_path: Path, transforms: object, field: str) -> None:
    path = _layout_file(tmp_path, transforms)
    with pytest.raises(ValueError) as info:
        load_layout(str(path))
    text = str(info.value)
    assert "\n" not in text and str(path) in text and f"field {field}:" in text


def test_serve_stops_with_exit_2_and_one_line(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    from xinfer_ros.cli.serve import main

    path = _layout_file(tmp_path, {"adapt_to_pi": False, "clean_prompt": True})
    assert main(["--openpi", "--port", "0", "--backend", "emulated", "--layout",
                 str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and str(path) in err
    assert "field transforms.delta_action_mask: missing" in err


def test_layout_resample_defaults_to_openpis_and_refuses_unknown(tmp_path: Path) -> None:
    ok = {"adapt_to_pi": False, "delta_action_mask": [], "clean_prompt": True}
    layout = load_layout(str(_layout_file(tmp_path, ok)))
    assert layout is not None and layout.resample == "pil_bilinear"
    assert all(lay.resample == "pil_bilinear" for lay in BUILTIN_LAYOUTS.values())
    path = tmp_path / "bad.yaml"
    path.write_text("name: arm\ncameras: [obs/front]\nstate_key: obs/q\nresample: lanczos\n"
                    "transforms: {adapt_to_pi: false, delta_action_mask: [], "
                    "clean_prompt: true}\n")
    with pytest.raises(ValueError, match=f"layout file {path}: field resample: must be one"):
        load_layout(str(path))


def test_a_layout_the_model_cannot_carry_is_refused_at_start_up(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from xinfer_ros.cli.serve import main
    from xinfer_ros.openpi.errors import LayoutSettingError
    from xinfer_ros.openpi.server import OpenPIServer, ServerConfig

    narrow = ModelSpec((("cam", 8, 8),), state_dim=8, horizon=4, action_dim=7)
    with pytest.raises(LayoutSettingError, match=r"field transforms\.adapt_to_pi"):
        OpenPIServer(object(), narrow, ServerConfig(layout=ALOHA))
    OpenPIServer(object(), narrow, ServerConfig(layout=LIBERO))  # fits
    # The emulated "tiny" model has 14 state and action values: ALOHA fits, and a
    # 16-entry mask does not.
    path = _layout_file(tmp_path, {"adapt_to_pi": False, "clean_prompt": True,
                                   "delta_action_mask": [True] * 16}, action_dim=16)
    assert main(["--openpi", "--port", "0", "--backend", "emulated", "--model", "tiny",
                 "--layout", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "field transforms.delta_action_mask: 16 entries exceed" in err


def test_auto_detected_aloha_on_a_narrow_model_names_the_state_field() -> None:
    from xinfer_ros.openpi.errors import ObservationFieldError

    narrow = ModelSpec((("cam", 8, 8),), state_dim=14, horizon=4, action_dim=7)
    obs = {"images": {"cam_high": np.zeros((8, 8, 3), np.uint8)}, "state": np.zeros(14),
           "prompt": "fold"}
    with pytest.raises(ObservationFieldError, match="action_dim 7") as info:
        map_observation(obs, None, narrow)
    assert info.value.field == "state"
