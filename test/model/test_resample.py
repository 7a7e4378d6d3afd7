"""Image resampling per training convention, against Pillow and torch themselves."""

from __future__ import annotations

import numpy as np
import pytest

from xinfer_ros.model.images import fit_image, resize_rgb

Image = pytest.importorskip("PIL.Image")


def _image(h: int, w: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)


def _pil(img: np.ndarray, h: int, w: int, method: int) -> np.ndarray:
    return np.asarray(Image.fromarray(img).resize((w, h), resample=method))


@pytest.mark.parametrize("shape", [(480, 640, 168, 224), (37, 53, 224, 224),
                                   (224, 224, 56, 56), (100, 80, 100, 33),
                                   (100, 80, 41, 80), (7, 9, 3, 2)])
@pytest.mark.parametrize("kind", ["bilinear", "bicubic"])
def test_pil_modes_equal_pillow(shape: tuple[int, int, int, int], kind: str) -> None:
    h, w, nh, nw = shape
    img = _image(h, w)
    method = Image.BILINEAR if kind == "bilinear" else Image.BICUBIC
    np.testing.assert_array_equal(resize_rgb(img, nh, nw, f"pil_{kind}"),  # type: ignore[arg-type]
                                  _pil(img, nh, nw, method))


def test_pil_bilinear_within_one_level_of_pillow_on_any_letterbox_shrink() -> None:
    # Pillow sometimes runs its vertical pass first; we always run the horizontal one
    # first (as its source describes), which moves some pixels by one level.
    rng = np.random.default_rng(3)
    for _ in range(30):
        h, w = (int(v) for v in rng.integers(60, 700, 2))
        ratio = max(w / 224, h / 224)
        nh, nw = int(h / ratio), int(w / ratio)
        img = _image(h, w, int(rng.integers(1 << 30)))
        diff = np.abs(resize_rgb(img, nh, nw, "pil_bilinear").astype(int)
                      - _pil(img, nh, nw, Image.BILINEAR).astype(int))
        assert diff.max() <= 1


def test_pil_letterbox_equals_openpis_resize_with_pad() -> None:
    """openpi's image_tools.resize_with_pad, written out with Pillow."""
    img = _image(480, 640, 5)
    ratio = max(640 / 224, 480 / 224)
    rh, rw = int(480 / ratio), int(640 / ratio)
    expected = np.zeros((224, 224, 3), np.uint8)
    top, left = int((224 - rh) / 2), int((224 - rw) / 2)
    expected[top:top + rh, left:left + rw] = _pil(img, rh, rw, Image.BILINEAR)
    np.testing.assert_array_equal(fit_image(img, 224, 224, "pad", "pil_bilinear"), expected)


def test_bilinear_noaa_is_torchs_interpolate_without_antialias() -> None:
    torch = pytest.importorskip("torch")
    img = _image(480, 640, 7)
    x = torch.from_numpy(img).permute(2, 0, 1)[None].float()
    ref = torch.nn.functional.interpolate(x, size=(168, 224), mode="bilinear",
                                          align_corners=False, antialias=False)
    ref_u8 = ref[0].permute(1, 2, 0).round().clamp(0, 255).numpy()
    diff = np.abs(resize_rgb(img, 168, 224, "bilinear_noaa").astype(float) - ref_u8)
    assert diff.max() <= 1  # OpenCV rounds in 8-bit fixed point
    # and it is not antialiased: the area filter differs clearly on a textured frame
    area = resize_rgb(img, 168, 224, "area").astype(float)
    assert np.abs(area - ref_u8).mean() > 10 * diff.mean()


def test_default_resample_follows_the_checkpoints_pipeline() -> None:
    from xinfer_ros.model.pi0.preset import Pi0Preset, default_resample

    assert default_resample("lerobot", "/ckpt/policy_preprocessor.json") == "bilinear_noaa"
    assert default_resample("transformers", "/ckpt/norm_stats.json") == "pil_bilinear"
    assert default_resample("transformers", "/ckpt/processor_config.json") == "pil_bicubic"
    assert default_resample("random", "identity (random weights)") == "area"
    base = {"name": "r", "family": "pi0", "robot": {"cameras": ["c"], "state_dim": 2,
                                                    "action_dim": 2}}
    assert Pi0Preset.from_dict({**base, "image_resample": "area"}).image_resample == "area"
    with pytest.raises(ValueError, match="image_resample must be one of"):
        Pi0Preset.from_dict({**base, "image_resample": "lanczos"})
