"""Execution lanes: the threads that run model units and CPU work.

Lane groups follow the paper's process split (§4.2, §5): ViT and Prefill share the
*context* group, Action runs in the *action* group, and CPU preparation/output runs in
a small *cpu* pool. Every thread of a group is one lane; on CUDA the backend gives each
lane its own stream in :meth:`Backend.lane_setup`, so units of different lanes can run
concurrently on the device while each lane's host submission stays independent. (The
paper runs the two groups as separate processes under MPS; here they are threads of
one process, which keeps weights shared without IPC; MPS processes remain an option
for a deployment that needs separate CUDA contexts.)

A fourth group, *fast*, has one lane: the engine's fast path runs an idle engine's
lone request there from preparation to output, back to back (see
:mod:`~xinfer_ros.engine.engine`). It borrows no other group's lane, so a request that
arrives mid-chain finds every stage's lanes free for it.

:class:`SharedExclusiveGate` implements the "CPU overlap off" ablation: model units
hold it shared, CPU work holds it exclusively.
"""

from __future__ import annotations

import itertools
import logging
import math
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import ParamSpec, TypeVar

from xinfer_ros.core.stages import Stage

__all__ = [
    "ACTION_GROUP",
    "CONTEXT_GROUP",
    "CPU_GROUP",
    "FAST_GROUP",
    "LaneGroup",
    "LaneInfo",
    "SharedExclusiveGate",
    "current_lane",
    "group_of",
]

CONTEXT_GROUP = "context"
ACTION_GROUP = "action"
CPU_GROUP = "cpu"
FAST_GROUP = "fast"

_local = threading.local()
_LOG = logging.getLogger("xinfer_ros.engine.lanes")
_P = ParamSpec("_P")
_R = TypeVar("_R")


@dataclass
class LaneInfo:
    """Identity and backend resources of one lane thread.

    Attributes:
        group: lane group name (context, action, cpu, fast).
        index: lane index within the group.
        stream: backend resource bound to the lane (a CUDA stream on CUDA, else None).
        issued_at: engine time the scheduler issued the unit now running on this lane
            (set by the engine before each unit; NaN outside the engine).
        extra: further per-lane backend state.
        setup_error: why the backend's lane setup failed (the lane's units then fail
            with it instead of running on a half-initialised lane); None when it worked.
    """

    group: str
    index: int
    stream: object = None
    issued_at: float = math.nan
    extra: dict[str, object] = field(default_factory=dict)
    setup_error: BaseException | None = None


def current_lane() -> LaneInfo | None:
    """The :class:`LaneInfo` of the calling thread, or None outside a lane."""
    return getattr(_local, "lane", None)


def group_of(stage: Stage) -> str:
    """Lane group that executes ``stage``."""
    return ACTION_GROUP if stage is Stage.ACTION else CONTEXT_GROUP


class LaneGroup:
    """A fixed set of lane threads executing submitted callables.

    Args:
        name: group name.
        threads: number of lanes (one per concurrently executable unit).
        setup: called once in each lane thread with its :class:`LaneInfo` (streams,
            thread counts) before the first unit runs.
        first_index: index of the first lane (pools of one group number on).
    """

    def __init__(self, name: str, threads: int, setup: Callable[[LaneInfo], None],
                 first_index: int = 0) -> None:
        if threads < 1:
            raise ValueError(f"lane group {name!r} needs >= 1 thread, got {threads}")
        self.name = name
        self.threads = threads
        self._setup = setup
        self._ids = itertools.count(first_index)
        self._pool = ThreadPoolExecutor(max_workers=threads,
                                        thread_name_prefix=f"xinfer-{name}-{first_index}",
                                        initializer=self._init_thread)

    def _init_thread(self) -> None:
        lane = LaneInfo(self.name, next(self._ids))
        _local.lane = lane
        # An initializer that raises breaks a ThreadPoolExecutor: every later submit
        # fails inside the pool and nobody hears of it. Keep the lane; its units fail.
        try:
            self._setup(lane)
        except Exception as exc:
            lane.setup_error = exc
            _LOG.error("lane %s/%d could not start: %s: %s", self.name, lane.index,
                       type(exc).__name__, exc)

    def submit(self, fn: Callable[_P, _R], /, *args: _P.args, **kwargs: _P.kwargs) -> Future[_R]:
        """Run ``fn(*args, **kwargs)`` on a free lane (queued behind busy lanes)."""
        return self._pool.submit(fn, *args, **kwargs)

    def shutdown(self, wait: bool = True) -> None:
        """Stop the lanes (pending callables still run when ``wait``)."""
        self._pool.shutdown(wait=wait, cancel_futures=not wait)


class SharedExclusiveGate:
    """A readers-writer gate with writer preference.

    Args:
        enabled: when False both context managers are no-ops (CPU overlap on).
    """

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self._cond = threading.Condition()
        self._shared = 0
        self._exclusive = False
        self._writers_waiting = 0

    @contextmanager
    def shared(self) -> Iterator[None]:
        """Hold the gate together with other shared holders (model units)."""
        if not self.enabled:
            yield
            return
        with self._cond:
            # Writer preference: a waiting CPU task goes before the next model unit, or
            # a steady stream of units would starve preparation and output.
            while self._exclusive or self._writers_waiting:
                self._cond.wait()
            self._shared += 1
        try:
            yield
        finally:
            with self._cond:
                self._shared -= 1
                self._cond.notify_all()

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        """Hold the gate alone (CPU work when it must not overlap model work)."""
        if not self.enabled:
            yield
            return
        with self._cond:
            self._writers_waiting += 1
            while self._exclusive or self._shared:
                self._cond.wait()
            self._writers_waiting -= 1
            self._exclusive = True
        try:
            yield
        finally:
            with self._cond:
                self._exclusive = False
                self._cond.notify_all()
