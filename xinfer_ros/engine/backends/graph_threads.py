"""The one thread that records and replays the ``cudagraphs`` Action loop.

``torch.compile``'s ``reduce-overhead`` mode keeps its CUDA graph trees (the recorded
graphs and their memory pool) in state local to a Python thread, and a graph recorded
on one thread is meant to be replayed on that thread:

* a torch without pytorch/pytorch#184357 (merged June 2026; the lent H200's 2.11
  predates it) keeps that state only on the thread that imported
  ``torch._inductor.cudagraph_trees`` and on autograd's threads; any other thread fails
  an assertion in ``cudagraph_trees.get_obj`` (pytorch/pytorch#123177);
* a later torch gives each new thread empty state of its own, so every lane (and every
  short-lived calibration thread) would record the graphs again into a pool of its own.

Handing the compiling thread's trees to each lane through torch's private thread-local
store (this module's first design) crashed the interpreter on the H200: a segmentation
fault on the main thread in plain Python code, right after calibration's lane threads
had replayed the graphs and exited (docs/BENCHMARKS.md 1.4). So no tree is shared:
:class:`GraphThread` is one long-lived thread with trees of its own; the backend sends
every Action forward of the ``cudagraphs`` mode to it, warm-up included, so recording
and replay happen on the thread that owns them, whichever lane or caller asked. The
engine already runs one Action lane under ``cudagraphs`` (one graph's static buffers
serve one replay at a time), so the hop costs one hand-off per unit and no overlap.

The thread's trees go into torch's C++ thread-local store as well as the module's
``threading.local``: the H200's first run of this class, with the latter only, failed
its first compilation with a bare ``AssertionError`` (the shape of ``get_obj``'s), most
possibly in a thread torch started from it that copies only the C++ store (a guess:
the next GPU run's traceback decides).
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from types import ModuleType
from typing import TypeVar

import torch

__all__ = ["GraphThread"]

_T = TypeVar("_T")

#: The thread-local attributes ``cudagraph_trees`` looks up (its ``get_obj`` names).
_TREE_STATE = ("tree_manager_containers", "tree_manager_locks")


def _trees() -> ModuleType:
    # Imported on use: heavy, and needed only for CUDA graphs.
    from torch._inductor import cudagraph_trees

    return cudagraph_trees


def _own_trees(local: object) -> None:
    """Give the calling thread graph trees of its own (what torch >= #184357 does itself).

    They go into both places ``cudagraph_trees.get_obj`` looks: the module's
    ``threading.local`` for this thread, and torch's C++ thread-local store, which
    threads that torch starts from this one (autograd's, and any compile helper that
    carries the caller's thread-local state) copy; the importing thread stashes its own
    there at import the same way.
    """
    fresh: dict[str, object] = {_TREE_STATE[0]: {}, _TREE_STATE[1]: defaultdict(threading.Lock)}
    stash = getattr(torch._C, "_stash_obj_in_tls", None)
    for name, empty in fresh.items():
        if not hasattr(local, name):
            setattr(local, name, empty)
        if stash is not None:
            stash(name, getattr(local, name))


class GraphThread:
    """Run callables on one thread that owns its CUDA graph trees.

    Args:
        setup: run first on the thread (the backend selects its CUDA device there).
        trees: ``torch._inductor.cudagraph_trees`` (imported when None).
    """

    __slots__ = ("_ident", "_local", "_pool")

    def __init__(self, setup: Callable[[], None] | None = None,
                 trees: ModuleType | None = None) -> None:
        self._local = (trees if trees is not None else _trees()).local

        def start() -> int:
            _own_trees(self._local)
            if setup is not None:
                setup()
            return threading.get_ident()

        self._pool: ThreadPoolExecutor | None = ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="xinfer-cuda-graphs")
        try:
            # The first task, not the executor's initializer: a failing set-up then
            # raises its own error here instead of a bare BrokenThreadPool later.
            #: The thread's ident, so a call made on it runs inline, not in a deadlock.
            self._ident = self._pool.submit(start).result()
        except BaseException:
            self._pool.shutdown(wait=True)
            raise

    @property
    def ident(self) -> int:
        """``threading.get_ident()`` of the graph thread."""
        return self._ident

    def call(self, fn: Callable[[], _T]) -> _T:
        """``fn()`` on the graph thread; its result, or its exception raised here.

        Raises:
            RuntimeError: after :meth:`close`.
        """
        if threading.get_ident() == self._ident:
            return fn()
        pool = self._pool  # read once: close() may run on another thread
        if pool is None:
            raise RuntimeError("the CUDA graph thread is closed")
        try:
            future = pool.submit(fn)
        except RuntimeError:  # shut down between the read and the submit
            raise RuntimeError("the CUDA graph thread is closed") from None
        return future.result()

    def close(self) -> None:
        """Drop the thread's references to its trees (on the thread) and stop it.

        The recorded graphs and their memory pool live on while the compiled step that
        holds their tree manager does (the model keeps it), so a backend opens one graph
        thread for its lifetime rather than one per switch into ``cudagraphs``.
        """
        pool, self._pool = self._pool, None
        if pool is None:
            return
        pool.submit(self._drop_trees)
        pool.shutdown(wait=True)

    def _drop_trees(self) -> None:
        stash = getattr(torch._C, "_stash_obj_in_tls", None)
        for name in _TREE_STATE:
            setattr(self._local, name, None)
            if stash is not None:
                stash(name, None)
