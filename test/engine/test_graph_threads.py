"""The cudagraphs Action loop records and replays on one thread (graph_threads), no GPU."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")

from xinfer_ros.core.stages import Stage  # noqa: E402
from xinfer_ros.engine.backends import make_backend  # noqa: E402
from xinfer_ros.engine.backends.graph_threads import GraphThread  # noqa: E402
from xinfer_ros.engine.lanes import LaneInfo  # noqa: E402

_NAMES = ("tree_manager_containers", "tree_manager_locks")


def _old_trees() -> SimpleNamespace:
    """A cudagraph_trees look-alike of torch 2.11: only the importing thread has state."""
    local = threading.local()
    local.tree_manager_containers = {"owner": "main"}
    local.tree_manager_locks = {"owner": "main"}

    def get_obj(local: object, name: str) -> object:
        if hasattr(local, name):
            return getattr(local, name)
        raise AssertionError(f"{name} is not in this thread's TLS")  # as pytorch#123177

    return SimpleNamespace(local=local, get_obj=get_obj)


def _real_trees() -> object:
    from torch._inductor import cudagraph_trees

    return cudagraph_trees


@pytest.mark.parametrize("trees", [_old_trees, _real_trees], ids=["torch-2.11-like", "installed"])
def test_the_graph_thread_keeps_trees_of_its_own_apart_from_the_caller(trees) -> None:
    # torch 2.11's lookup fails on a fresh thread; the installed one may give it state of
    # its own or fail: either way the graph thread has one state, on every call.
    module = trees()
    graphs = GraphThread(trees=module)
    try:
        def look() -> list[object]:
            return [module.get_obj(module.local, name) for name in _NAMES]

        first, again = graphs.call(look), graphs.call(look)
        assert all(a is b for a, b in zip(first, again, strict=True))
        assert all(o is not m for o, m in zip(first, look(), strict=True))
        # The same objects in torch's C++ store, which threads torch starts from this
        # one copy (the lookup that failed on the H200 without it).
        stashed = graphs.call(lambda: [torch._C._get_obj_in_tls(name) for name in _NAMES])
        assert all(a is b for a, b in zip(first, stashed, strict=True))
    finally:
        graphs.close()


def test_calls_run_on_the_one_thread_nest_without_deadlock_and_raise_in_the_caller() -> None:
    seen: list[str] = []
    graphs = GraphThread(setup=lambda: seen.append("setup"))
    try:
        assert graphs.call(threading.get_ident) == graphs.ident != threading.get_ident()
        assert graphs.call(lambda: graphs.call(lambda: 7)) == 7  # inline on its own thread
        callers = [threading.Thread(target=lambda: seen.append(str(graphs.call(
            threading.get_ident)))) for _ in range(3)]
        for caller in callers:
            caller.start()
        for caller in callers:
            caller.join()
        assert seen == ["setup"] + [str(graphs.ident)] * 3  # set up once, one thread

        def fail() -> None:
            raise ValueError("forward failed")

        with pytest.raises(ValueError, match="forward failed"):
            graphs.call(fail)
    finally:
        graphs.close()
    graphs.close()  # twice is harmless
    with pytest.raises(RuntimeError, match="closed"):
        graphs.call(lambda: None)


def test_the_backend_runs_action_forwards_and_only_those_on_its_graph_thread() -> None:
    backend = make_backend("torch", model="pi0-tiny", device="cpu", threads=1)
    try:
        assert backend._graph_thread() is None and backend._graphs is None  # eager
        ran: list[tuple[Stage, int]] = []

        def recording(stage: Stage, states: object, **kw: object) -> None:
            ran.append((stage, threading.get_ident()))  # where it ran, not what

        fresh = backend.state_factory()
        states = {stage: fresh(stage) for stage in (Stage.VIT, Stage.PREFILL, Stage.ACTION)}
        backend.model.run_batch = recording  # type: ignore[method-assign]
        lane = LaneInfo("action", 0)

        def run_all() -> None:
            for stage, state in states.items():
                backend.run_stage(stage, state, lane)

        # "cudagraphs" needs CUDA to compile; the routing reads only the mode.
        backend.model.compile_mode = "cudagraphs"
        run_all()
        graphs = backend._graphs
        assert graphs is not None
        me = threading.get_ident()
        assert ran == [(Stage.VIT, me), (Stage.PREFILL, me), (Stage.ACTION, graphs.ident)]
        # Out of cudagraphs every forward runs on its caller, but the thread stays for a
        # later return (the model's compiled step keeps that thread's graphs).
        backend.model.compile_mode = "off"
        ran.clear()
        run_all()
        assert ran == [(Stage.VIT, me), (Stage.PREFILL, me), (Stage.ACTION, me)]
        backend.model.compile_mode = "cudagraphs"
        assert backend._graph_thread() is graphs
        backend.model.compile_mode = "off"
    finally:
        backend.close()
    assert backend._graphs is None
    with pytest.raises(RuntimeError, match="closed"):
        graphs.call(lambda: None)


def test_a_failing_set_up_raises_its_own_error_and_leaves_no_thread() -> None:
    before = threading.active_count()

    def broken() -> None:
        raise OSError("no such device")

    with pytest.raises(OSError, match="no such device"):
        GraphThread(setup=broken)
    assert threading.active_count() == before
