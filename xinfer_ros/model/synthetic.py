"""Synthetic, deterministic request inputs (benchmarks, tests, calibration).

The paper's serving study uses fixed inputs per model: three camera views, a shared
instruction and an all-zero 14-dimensional state (Appendix B.1). These helpers build
the same kind of request from a seed.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from xinfer_ros.model.config import VLAConfig
from xinfer_ros.model.io import ModelIO, reference_io

__all__ = ["DEFAULT_INSTRUCTION", "SyntheticInputs", "synthetic_inputs"]

#: A 41-byte instruction: the paper's instruction segment is 40-41 tokens (Table 1).
DEFAULT_INSTRUCTION = "pick up the parcel and put it barcode up."


@dataclasses.dataclass(frozen=True)
class SyntheticInputs:
    """Raw request inputs as a robot would send them.

    Attributes:
        images: One ``HxWx3`` uint8 RGB image per camera, at the model input size.
        instruction: Task instruction.
        state: Robot state (zeros, as in the paper's serving runs).
        prev_chunk: A smooth previous chunk ``(H, D)`` for real-time chunking.
    """

    images: list[np.ndarray]
    instruction: str
    state: np.ndarray
    prev_chunk: np.ndarray


def synthetic_inputs(model: VLAConfig | ModelIO, seed: int = 0) -> SyntheticInputs:
    """Build deterministic raw inputs for a model.

    Args:
        model: What the model takes (a reference configuration or any model's
            :class:`~xinfer_ros.model.presets.ModelIO`): camera sizes, H, D, state_dim.
        seed: Seed of the image noise and of the previous chunk.
    """
    io = reference_io(model) if isinstance(model, VLAConfig) else model
    rng = np.random.default_rng(seed)
    images = [
        rng.integers(0, 256, size=(cam.height, cam.width, 3), dtype=np.uint8)
        for cam in io.cameras
    ]
    # A smooth trajectory (sum of low-frequency sines) looks like a real chunk.
    t = np.linspace(0.0, 1.0, io.horizon)[:, None]
    phase = rng.uniform(0.0, 2.0 * np.pi, size=(1, io.action_dim))
    amp = rng.uniform(0.3, 1.0, size=(1, io.action_dim))
    prev = amp * np.sin(2.0 * np.pi * 0.5 * t + phase)
    return SyntheticInputs(
        images=images,
        instruction=DEFAULT_INSTRUCTION,
        state=np.zeros(io.state_dim),
        prev_chunk=prev,
    )
