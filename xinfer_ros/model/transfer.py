"""Request inputs from the CPU to the model's device."""

from __future__ import annotations

import numpy as np
import torch

__all__ = ["to_device"]


def to_device(array: np.ndarray, device: torch.device,
              dtype: torch.dtype | None = None) -> torch.Tensor:
    """``array`` as a tensor on ``device`` (and ``dtype``).

    To a CUDA device the copy goes through pinned memory and does not block the host:
    it is queued on the current stream like the kernels that read it. (A
    ``non_blocking`` copy from pageable memory would be synchronous anyway.)
    """
    tensor = torch.from_numpy(np.ascontiguousarray(array))
    if device.type == "cuda":
        return tensor.pin_memory().to(device=device, dtype=dtype, non_blocking=True)
    return tensor.to(device=device, dtype=dtype)
