"""CUDA-graph state for lane threads (the ``cudagraphs`` Action loop).

``torch.compile``'s ``reduce-overhead`` mode keeps its CUDA graph trees in state local
to a thread. In a torch without pytorch/pytorch#184357 (merged June 2026; the lent
H200's 2.11 most likely predates it) that state exists only on the thread that
imported ``torch._inductor.cudagraph_trees`` and on the autograd engine's threads,
which torch hands it to; any other thread that replays or records a graph fails an
assertion in ``cudagraph_trees.get_obj`` (pytorch/pytorch#123177). The backend
compiles and warms up the Action loop on the thread that builds it, and then serves
from lane threads, so on such a torch every compiled Action unit would fail.

:func:`lane_adopter` finds out, on the compiling thread, whether a fresh thread gets
that state by itself. Where it does not, it returns a function that each lane thread
runs at set-up: it hands the lane the compiling thread's graph trees, the way torch
hands them to autograd's threads, so that the one Action lane (and the fast path's
lane, which runs only while the engine is idle) replays the graphs recorded at warm-up
instead of failing.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from types import ModuleType

import torch

__all__ = ["LaneAdopter", "lane_adopter", "share_graph_trees"]

#: What a lane thread runs at set-up to use the compiling thread's CUDA graph trees.
LaneAdopter = Callable[[], None]

#: The thread-local objects ``cudagraph_trees`` looks up (its ``get_obj`` names).
_TREE_STATE = ("tree_manager_containers", "tree_manager_locks")


def _trees() -> ModuleType:
    # Imported on use: heavy, and needed only for CUDA graphs.
    from torch._inductor import cudagraph_trees

    return cudagraph_trees


def _fresh_thread_has_state(trees: ModuleType) -> bool:
    """Whether a new Python thread can look up the graph trees without help."""
    found: list[bool] = []

    def probe() -> None:
        try:
            trees.get_obj(trees.local, _TREE_STATE[0])
        except AssertionError:
            found.append(False)
        else:
            found.append(True)

    thread = threading.Thread(target=probe, name="xinfer-graph-probe")
    thread.start()
    thread.join()
    return found == [True]


def share_graph_trees(trees: ModuleType | None = None) -> LaneAdopter:
    """On the compiling thread: what hands its graph trees to another thread.

    Args:
        trees: ``torch._inductor.cudagraph_trees`` (imported when None).

    Returns:
        A function to run on a lane thread; afterwards that thread's lookups find the
        compiling thread's objects (torch's own thread-local store, as for autograd).
    """
    module = trees if trees is not None else _trees()
    state = {name: module.get_obj(module.local, name) for name in _TREE_STATE}

    def adopt() -> None:
        for name, obj in state.items():
            torch._C._stash_obj_in_tls(name, obj)

    return adopt


def lane_adopter(trees: ModuleType | None = None) -> LaneAdopter | None:
    """On the thread that compiled the ``cudagraphs`` loop: what each lane runs at set-up.

    Returns:
        None where this torch gives a fresh thread graph-tree state of its own, else
        :func:`share_graph_trees`'s function.
    """
    module = trees if trees is not None else _trees()
    return None if _fresh_thread_has_state(module) else share_graph_trees(module)
