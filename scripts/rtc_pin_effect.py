"""Effect of hard pinning the first d keyframes on pi0-tiny (docs/PI0.md, "Hard pinning").

Pinning (our extension beyond the RTC paper) puts the first d keyframes on their
straight path from noise to the previous chunk at every Euler step. This script
serves 10 pairs of requests (a chunk, then a request guided by it with d = s = 8) with
pinning on and, by swapping the pinning step for the identity, off (soft guidance
alone), and prints how far the new chunk's first d keyframes land from the previous
chunk, in robot units, before the output's final copy. Run (about 25 s on a CPU):

    python scripts/rtc_pin_effect.py
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from xinfer_ros.model.pi0 import stages
from xinfer_ros.model.serving import load_stage_model

D_COMMIT = SHIFT = 8
TRIALS = 10


def main() -> None:
    """Print the deviation of the first d keyframes with pinning off and on."""
    torch.set_num_threads(1)
    model = load_stage_model("pi0-tiny")
    rng = np.random.default_rng(0)
    images = [rng.integers(0, 256, (c.height, c.width, 3), dtype=np.uint8)
              for c in model.io.cameras]
    state = rng.uniform(-0.5, 0.5, model.io.state_dim)
    real_pin = stages._Guidance.pin  # swapped per run: a measurement, not a serving option

    def run(prev: Any, seed: int, pin: bool = True) -> np.ndarray:
        stages._Guidance.pin = real_pin if pin else (  # type: ignore[method-assign]
            lambda self, x, noise, time: x)
        st = model.prepare(images, "pick up the parcel", state, prev_chunk=prev,
                           d=D_COMMIT if prev is not None else 0,
                           prev_shift=SHIFT if prev is not None else 0, seed=seed)
        model.vit(st)
        model.prefill(st)
        model.action(st)
        return model.processor.postprocess(st.actions, None)  # without the final copy

    worst: dict[bool, list[float]] = {True: [], False: []}
    scale = 0.0
    for trial in range(TRIALS):
        first = run(None, 100 + trial)
        scale = max(scale, float(np.abs(first).max()))
        for pin in (True, False):
            out = run(first, 200 + trial, pin)
            worst[pin].append(float(np.abs(out[:D_COMMIT]
                                           - first[SHIFT:SHIFT + D_COMMIT]).max()))
    stages._Guidance.pin = real_pin  # type: ignore[method-assign]
    for pin in (False, True):
        values = np.array(worst[pin])
        print(f"pinning {'on' if pin else 'off'}: max |chunk[:d] - prev[s:s+d]| over "
              f"{TRIALS} requests: mean {values.mean():.4f}, max {values.max():.4f} "
              f"(largest |action| {scale:.2f})")


if __name__ == "__main__":
    main()
