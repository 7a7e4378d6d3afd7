"""Pipeline stages of a VLA request and the per-stage lifecycle states.

Every request runs three non-preemptive stages in this order (paper §4.2):
ViT (encode camera images), Prefill (language backbone, produces the KV cache) and
Action (the flow-matching action expert). Stages are ``IntEnum`` members so they index
per-stage tuples (``slots[Stage.PREFILL]``) without a dictionary lookup.
"""

from __future__ import annotations

from enum import Enum, IntEnum

__all__ = ["DISPATCH_ORDER", "NUM_STAGES", "STAGES", "Stage", "StageState"]


class Stage(IntEnum):
    """A pipeline stage; the value is its position in the pipeline."""

    VIT = 0
    PREFILL = 1
    ACTION = 2

    @property
    def short(self) -> str:
        """One-letter name used in the paper and in rate-table files (V, P, A)."""
        return "VPA"[self.value]

    @classmethod
    def parse(cls, value: object) -> Stage:
        """Accept a ``Stage``, its index, its name (``"prefill"``) or its letter (``"P"``).

        Raises:
            ValueError: naming ``value`` when it is not a stage.
        """
        if isinstance(value, Stage):
            return value
        if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < NUM_STAGES:
            return cls(value)
        if isinstance(value, str):
            key = value.strip().upper()
            for stage in cls:
                if key in (stage.name, stage.short):
                    return stage
        raise ValueError(f"unknown stage {value!r}; expected one of V/P/A or vit/prefill/action")


class StageState(Enum):
    """Lifecycle of one stage of one request.

    ``WAITING``: an earlier stage has not finished. ``READY``: its inputs exist and it
    sits in the stage's ready queue. ``RUNNING``: issued to an execution slot.
    ``DONE``: its unit completed.
    """

    WAITING = "waiting"
    READY = "ready"
    RUNNING = "running"
    DONE = "done"


#: Stages in pipeline order.
STAGES: tuple[Stage, Stage, Stage] = (Stage.VIT, Stage.PREFILL, Stage.ACTION)
NUM_STAGES = 3
#: Order in which Algorithm 1 visits the stages: downstream first, so work that is
#: closest to producing a response gets the free slots first.
DISPATCH_ORDER: tuple[Stage, Stage, Stage] = (Stage.ACTION, Stage.PREFILL, Stage.VIT)
