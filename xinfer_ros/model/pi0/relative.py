"""Relative actions: a policy that predicts actions minus the state on a joint mask.

lerobot's π0 may be trained with ``use_relative_actions``: its pre-processor subtracts
the raw state from the actions on masked joints before normalising
(``RelativeActionsProcessorStep``), its post-processor adds the raw state back after
unnormalising (``AbsoluteActionsProcessorStep``). Serving the model therefore needs
the request's raw state at both ends; the previous chunk of real-time chunking is
re-expressed against the current state before it is normalised, as lerobot's RTC does
(``reanchor_relative_rtc_prefix``). NumPy only.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

__all__ = ["RelativeActions", "relative_mask"]


def relative_mask(action_dim: int, exclude_joints: Sequence[str],
                  action_names: Sequence[str] | None) -> tuple[bool, ...]:
    """Which action dimensions are relative, by lerobot's rule.

    Every dimension, unless both ``exclude_joints`` and ``action_names`` are given:
    then a dimension whose name contains (case-insensitively) an excluded token stays
    absolute; dimensions past the names are relative.
    """
    tokens = [str(t).lower() for t in exclude_joints if t]
    if not tokens or action_names is None:
        return (True,) * action_dim
    mask = [not any(t in str(name).lower() for t in tokens)
            for name in list(action_names)[:action_dim]]
    return tuple(mask + [True] * (action_dim - len(mask)))


@dataclasses.dataclass(frozen=True)
class RelativeActions:
    """The joint mask of a relative-action policy.

    Attributes:
        mask: Per action dimension, whether the model predicts it relative to the state.
        exclude_joints: The excluded name tokens, as the pipeline states them.
        action_names: The action names, as the pipeline states them (``None``: unnamed).
    """

    mask: tuple[bool, ...]
    exclude_joints: tuple[str, ...] = ()
    action_names: tuple[str, ...] | None = None

    def offset(self, state: np.ndarray) -> np.ndarray:
        """What the model's actions are relative to: the raw state on masked joints.

        Args:
            state: The raw robot state, at least ``len(mask)`` values.

        Returns:
            ``(len(mask),)`` float64: the state on masked joints, 0 elsewhere.
        """
        dims = len(self.mask)
        return np.where(np.asarray(self.mask), np.asarray(state, np.float64)[:dims], 0.0)
