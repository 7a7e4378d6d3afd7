"""CUDA-graph state for lane threads (the ``cudagraphs`` Action loop).

``torch.compile``'s ``reduce-overhead`` mode keeps its CUDA graph trees (the recorded
graphs and their memory pool) in state local to a thread. The backend compiles and
warms up the Action loop on the thread that builds it, and then serves from lane
threads, which would otherwise not see that state:

* a torch without pytorch/pytorch#184357 (merged June 2026; the lent H200's 2.11 most
  likely predates it) keeps it only on the thread that imported
  ``torch._inductor.cudagraph_trees`` and on autograd's threads, which torch hands it
  to; any other thread fails an assertion in ``cudagraph_trees.get_obj``
  (pytorch/pytorch#123177), so every compiled Action unit served from a lane would fail;
* a later torch gives each new thread empty state of its own, so each lane (and each
  calibration thread) would record the graphs again into a pool of its own.

:func:`lane_adopter` returns, on the compiling thread, what each lane thread runs at
set-up: it hands the lane the compiling thread's graph trees, the way torch hands them
to autograd's threads, through torch's own thread-local store. The one Action lane (on
CUDA the fast path leaves units to their lanes) and calibration's threads, one at a
time, then replay the graphs recorded at warm-up.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from types import ModuleType

import torch

__all__ = ["LaneAdopter", "lane_adopter"]

_LOG = logging.getLogger(__name__)

#: What a lane thread runs at set-up to use the compiling thread's CUDA graph trees.
LaneAdopter = Callable[[], None]

#: The thread-local objects ``cudagraph_trees`` looks up (its ``get_obj`` names).
_TREE_STATE = ("tree_manager_containers", "tree_manager_locks")


def _trees() -> ModuleType:
    # Imported on use: heavy, and needed only for CUDA graphs.
    from torch._inductor import cudagraph_trees

    return cudagraph_trees


def lane_adopter(trees: ModuleType | None = None) -> LaneAdopter | None:
    """On the thread that compiled the ``cudagraphs`` loop: what each lane runs at set-up.

    Args:
        trees: ``torch._inductor.cudagraph_trees`` (imported when None).

    Returns:
        A function to run on a lane thread; afterwards that thread's lookups find the
        compiling thread's objects. None (with a warning) where this torch lacks the
        private thread-local store: lanes then keep torch's own behaviour.
    """
    stash = getattr(torch._C, "_stash_obj_in_tls", None)
    if stash is None:
        _LOG.warning("this torch has no _stash_obj_in_tls: lane threads cannot share the "
                     "CUDA graphs recorded at warm-up")
        return None
    module = trees if trees is not None else _trees()
    state = {name: module.get_obj(module.local, name) for name in _TREE_STATE}

    def adopt() -> None:
        for name, obj in state.items():
            stash(name, obj)

    return adopt
