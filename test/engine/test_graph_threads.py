"""CUDA graph trees reach the lane threads (graph_threads), without a GPU."""

from __future__ import annotations

import threading
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from xinfer_ros.engine.backends import make_backend  # noqa: E402
from xinfer_ros.engine.backends.graph_threads import lane_adopter  # noqa: E402
from xinfer_ros.engine.lanes import LaneInfo  # noqa: E402

_NAMES = ("tree_manager_containers", "tree_manager_locks")


def _on_fresh_thread(fn: Callable[[], Any]) -> Any:
    """``fn()`` on a new thread: its result, or its exception raised here."""
    out: list[Any] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            out.append(fn())
        except BaseException as exc:  # handed to the caller
            errors.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    if errors:
        raise errors[0]
    return out[0]


def _fake_trees() -> SimpleNamespace:
    """A cudagraph_trees look-alike whose lookups fail off the main thread, like torch 2.11."""
    objects = {name: {"owner": name} for name in _NAMES}

    def get_obj(local: object, name: str) -> object:
        if threading.current_thread() is threading.main_thread():
            return objects[name]
        if torch._C._is_key_in_tls(name):
            return torch._C._get_obj_in_tls(name)
        raise AssertionError

    return SimpleNamespace(local=object(), get_obj=get_obj, objects=objects)


def test_an_adopting_thread_finds_the_compiling_threads_graph_trees() -> None:
    # The installed torch: without adopting, a fresh thread gets state of its own (a
    # torch with pytorch#184357) or fails the lookup (one without).
    from torch._inductor import cudagraph_trees as trees

    mine = {name: trees.get_obj(trees.local, name) for name in _NAMES}
    adopt = lane_adopter(trees)
    assert adopt is not None

    def looked_up() -> dict[str, object]:
        adopt()
        return {name: trees.get_obj(trees.local, name) for name in _NAMES}

    seen = _on_fresh_thread(looked_up)
    assert all(seen[name] is mine[name] for name in _NAMES)


def test_on_a_torch_whose_fresh_threads_fail_the_lookup_an_adopting_lane_succeeds() -> None:
    old = _fake_trees()
    with pytest.raises(AssertionError):
        _on_fresh_thread(lambda: old.get_obj(old.local, _NAMES[0]))
    adopt = lane_adopter(old)  # type: ignore[arg-type]
    assert adopt is not None

    def after_adopting() -> list[object]:
        adopt()
        return [old.get_obj(old.local, name) for name in _NAMES]

    assert _on_fresh_thread(after_adopting) == [old.objects[name] for name in _NAMES]


def test_without_torchs_thread_local_store_no_adopter_is_made(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(torch._C, "_stash_obj_in_tls")
    assert lane_adopter(_fake_trees()) is None  # type: ignore[arg-type]


def test_each_lane_runs_the_adopter_at_set_up_and_eager_clears_it() -> None:
    backend = make_backend("torch", model="pi0-tiny", device="cpu", threads=1)
    try:
        assert backend._graph_adopter is None  # eager: nothing to hand over
        calls: list[str] = []
        backend._graph_adopter = lambda: calls.append(threading.current_thread().name)
        lanes = [LaneInfo("action", 0), LaneInfo("fast", 0)]
        for lane in lanes:
            _on_fresh_thread(lambda lane=lane: backend.lane_setup(lane))
        assert len(calls) == 2 and threading.main_thread().name not in calls
        backend.set_compile("off")
        assert backend._graph_adopter is None
    finally:
        backend.close()
