"""RTC prefix masks and guidance weights (NumPy only)."""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest

from xinfer_ros.rtc import masks


def test_soft_mask_matches_paper_formula() -> None:
    horizon, d, overlap = 16, 4, 12
    w = masks.soft_prefix_mask(horizon, d, overlap)
    assert w.shape == (horizon,)
    np.testing.assert_array_equal(w[:d], 1.0)
    np.testing.assert_array_equal(w[overlap:], 0.0)
    for i in range(d, overlap):
        c = (overlap - i) / (overlap - d + 1)
        assert w[i] == pytest.approx(c * (math.exp(c) - 1.0) / (math.e - 1.0))
    # strictly decreasing over the soft region and below the frozen weight
    soft = w[d:overlap]
    assert np.all(np.diff(soft) < 0)
    assert soft[0] < 1.0
    assert soft[-1] > 0.0


def test_soft_mask_full_overlap_and_zero_frozen() -> None:
    w = masks.prefix_weights(8, 0, None, "soft")
    assert w[0] == pytest.approx((8 / 9) * math.expm1(8 / 9) / math.expm1(1.0))
    assert np.all(w > 0)


def test_hard_mask_is_first_d_only() -> None:
    w = masks.prefix_weights(16, 8, 12, "hard")
    np.testing.assert_array_equal(w, np.r_[np.ones(8), np.zeros(8)])
    np.testing.assert_array_equal(masks.hard_prefix_mask(5, 0), np.zeros(5))


@pytest.mark.parametrize(
    ("horizon", "frozen", "overlap", "word"),
    [(16, -1, 16, "d"), (16, 17, 16, "d"), (16, 10, 8, "overlap"), (16, 2, 17, "overlap")],
)
def test_invalid_lengths_name_the_quantity(
    horizon: int, frozen: int, overlap: int, word: str
) -> None:
    with pytest.raises(ValueError, match=word):
        masks.prefix_weights(horizon, frozen, overlap, "soft")


def test_unknown_mode_rejected() -> None:
    with pytest.raises(ValueError, match="mode"):
        masks.prefix_weights(16, 2, 16, "linear")  # type: ignore[arg-type]


def test_guidance_weight_values() -> None:
    assert masks.r_tau_squared(0.0) == 1.0
    assert masks.r_tau_squared(1.0) == 0.0
    assert masks.r_tau_squared(0.5) == pytest.approx(0.5)
    # tau = 0.5: (1 - tau) / (tau r^2) = 0.5 / 0.25 = 2 < beta
    assert masks.guidance_weight(0.5, beta=5.0) == pytest.approx(2.0)
    # diverging ends are clipped to beta
    assert masks.guidance_weight(0.0, beta=5.0) == 5.0
    assert masks.guidance_weight(1.0, beta=5.0) == 5.0
    assert masks.guidance_weight(0.1, beta=5.0) == 5.0
    assert masks.guidance_weight(0.5, beta=1.0) == 1.0
    tau = 0.3
    r2 = (1 - tau) ** 2 / (tau**2 + (1 - tau) ** 2)
    assert masks.guidance_weight(tau, beta=100.0) == pytest.approx((1 - tau) / (tau * r2))


def test_guidance_weights_per_step() -> None:
    w = masks.guidance_weights(10, beta=5.0)
    assert w.shape == (10,)
    assert w[0] == 5.0
    assert np.all(w <= 5.0)
    assert np.all(w > 0)
    with pytest.raises(ValueError):
        masks.guidance_weights(0)
    with pytest.raises(ValueError):
        masks.guidance_weight(1.5)
    with pytest.raises(ValueError):
        masks.guidance_weight(0.5, beta=-1.0)


def test_align_previous_chunk() -> None:
    prev = np.arange(16 * 2, dtype=float).reshape(16, 2)
    aligned, overlap = masks.align_previous_chunk(prev, 4)
    assert overlap == 12
    np.testing.assert_array_equal(aligned[:12], prev[4:])
    np.testing.assert_array_equal(aligned[12:], 0.0)
    with pytest.raises(ValueError, match="shift"):
        masks.align_previous_chunk(prev, 17)
    with pytest.raises(ValueError, match="shape"):
        masks.align_previous_chunk(prev[0], 0)


def test_masks_module_does_not_import_torch() -> None:
    code = (
        "import sys, xinfer_ros.rtc.masks; "
        "sys.exit(1 if any(m == 'torch' or m.startswith('torch.') for m in sys.modules) else 0)"
    )
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0
