"""How batched stage units map onto lanes: shared by the engine, calibration and simulator.

With ``max_batch`` > 1 a stage's ``slots`` concurrent units run in batches of at most
``max_batch`` on ``ceil(slots / max_batch)`` lanes (issue 16, item 3).
"""

from __future__ import annotations

__all__ = ["batch_sizes", "lanes_for"]


def lanes_for(units: int, max_batch: int) -> int:
    """Lanes that run ``units`` concurrent units in batches of at most ``max_batch``.

    Raises:
        ValueError: on ``max_batch`` below one.
    """
    if max_batch < 1:
        raise ValueError(f"max_batch must be >= 1, got {max_batch!r}")
    return -(-units // max_batch)


def batch_sizes(units: int, max_batch: int) -> list[int]:
    """An even split of ``units`` over :func:`lanes_for` lanes (calibration's batches)."""
    lanes = lanes_for(units, max_batch)
    return [units // lanes + (i < units % lanes) for i in range(lanes)] if units else []
