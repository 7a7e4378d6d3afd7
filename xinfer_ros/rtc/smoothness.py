"""How smooth the executed commands are where one chunk hands over to the next.

Real-time chunking exists so that switching to a new chunk does not jerk the robot:
the new chunk's first ``d`` keyframes equal the old chunk's, and guidance pulls the
rest of the overlap towards it. :class:`SpliceSmoothness` watches the executed command
stream and keeps, per joint, the largest step between consecutive commands at a chunk
switch and the largest step between consecutive commands of one chunk. A switch step
far above the within-chunk steps is a visible jerk.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

__all__ = ["SpliceSmoothness"]


class SpliceSmoothness:
    """Per-joint maxima of command steps, at chunk switches and within chunks.

    Args:
        action_dim: Number of joints.
    """

    def __init__(self, action_dim: int) -> None:
        self.switch_max = np.zeros(action_dim)
        self.within_max = np.zeros(action_dim)
        self.switches = 0
        self._last: npt.NDArray[np.float64] | None = None
        self._last_chunk: int | None = None

    def record(self, command: npt.NDArray[np.float64], chunk: int | None) -> None:
        """Account one executed command and the chunk it came from.

        Args:
            command: The command executed at this tick.
            chunk: Identifier of its chunk (``None`` for a held command, which counts
                neither as a switch nor as a step of a chunk).
        """
        if chunk is None:
            return
        if self._last is not None and self._last_chunk is not None:
            step = np.abs(command - self._last)
            if chunk != self._last_chunk:
                self.switches += 1
                np.maximum(self.switch_max, step, out=self.switch_max)
            else:
                np.maximum(self.within_max, step, out=self.within_max)
        self._last = np.asarray(command, dtype=np.float64).copy()
        self._last_chunk = chunk
