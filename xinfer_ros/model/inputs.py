"""One request's inputs as the front ends hand them to the engine and its backends.

The ROS server and the openpi endpoint build a :class:`RequestInputs` once, after their
own field checks (``xinfer_ros.serving.frontend.engine_inputs``); the engine carries it
untouched to ``Backend.prepare``, and the torch backend passes its fields to the
model's preparation, which checks shapes and values against the model's layout.
Torch-free (numpy only) so that the front ends and the emulated backend import it
without the model's dependencies.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

__all__ = ["RequestInputs"]


def _no_state() -> np.ndarray:
    return np.zeros(0, dtype=np.float64)


@dataclass(frozen=True, slots=True, eq=False)  # arrays compare element-wise: by identity
class RequestInputs:
    """What one request asks the model for; every field has the value a bare request has.

    The emulated backend reads only ``seed`` and ``work_factor``; a bare
    ``RequestInputs()`` is a valid emulated request, while the torch backend's model
    refuses its empty ``state`` and missing cameras with a field-naming ``InputError``.
    """

    #: One RGB ``(height, width, 3)`` frame per camera of the model, in its order;
    #: None for a camera the client masked out (π0 then sees a zero image).
    images: Sequence[np.ndarray | None] = ()
    #: The language instruction.
    instruction: str = ""
    #: The robot's joint state, in the model's order (finite float64).
    state: np.ndarray = field(default_factory=_no_state)
    #: The previous chunk on its own time axis, ``(H, D)``, or None (no RTC guidance).
    prev_chunk: np.ndarray | None = None
    #: d: keyframes of ``prev_chunk`` committed while this request is computed
    #: (0 without a previous chunk).
    commit: int = 0
    #: s: rows of ``prev_chunk`` already executed at the send tick (RTC Eq. 5).
    prev_shift: int = 0
    #: Real leading columns of ``prev_chunk`` when a client sent fewer than D, else None.
    prev_dims: int | None = None
    #: RTC guidance weighting of the model (``soft``: the paper's decaying weights).
    rtc_mode: str = "soft"
    #: The request's noise seed; None: the engine's request id.
    seed: int | None = None
    #: Emulated backend only: scales the request's work in every stage (> 0), an
    #: emulated heavier or lighter request (fault and ordering tests).
    work_factor: float = 1.0
