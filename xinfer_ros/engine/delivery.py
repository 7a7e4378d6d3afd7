"""Delivery of results: every request the engine accepted or refused ends here, once.

:class:`ResultDelivery` releases the backend state, retires the request from the live
table, builds the :class:`EngineResult` (with its deadline and, for an OK result,
the release time phase spreading chose) and hands it to the callback and the future.
It runs on the dispatcher, or on the caller's thread for an immediate refusal; a
failing release or callback is logged and never stops the engine.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import numpy as np

from xinfer_ros.core.timing import MS_PER_S
from xinfer_ros.engine.admission import LiveRequest, LiveTable
from xinfer_ros.engine.backends.base import AnyBackend
from xinfer_ros.engine.clock import Clock
from xinfer_ros.engine.spreading import ReleasePlanner
from xinfer_ros.engine.types import EngineResult, Status

__all__ = ["Note", "ResultDelivery"]

#: ``note(message, *args, level=..., exc_info=...)``: the engine's logger.
Note = Callable[..., None]


class ResultDelivery:
    """Finish requests exactly once.

    Args:
        backend: Releases each request's state.
        table: The live table the request is retired from.
        clock: Stamps the finish time.
        note: Logs through the engine's logger.
        on_finish: Called with each finished request id before its result is built
            (the execution gates forget it).
        releases: Stamps each OK result's release time (phase spreading).
    """

    def __init__(self, backend: AnyBackend, table: LiveTable, clock: Clock, note: Note,
                 on_finish: Callable[[int], object], *, releases: ReleasePlanner) -> None:
        self._backend = backend
        self._table = table
        self._clock = clock
        self._note = note
        self._on_finish = on_finish
        self._releases = releases

    def finish(self, live: LiveRequest, status: Status, reason: str,
               actions: np.ndarray | None = None) -> None:
        """Release ``live``'s state and deliver its result (a no-op once delivered)."""
        self._on_finish(live.rid)
        if live.state is not None:
            try:
                self._backend.release(live.state)
            except Exception:  # releasing must not break the dispatcher
                self._note("release failed for request %d", live.rid, level=logging.ERROR,
                           exc_info=True)
            live.state = None
        if live.future.done():
            return
        now = self._clock.now()
        self._table.retire(live, status)
        live.timings.total_ms = (now - live.submitted) * MS_PER_S
        release = (self._releases.release_at(live.robot_id, now, live.arrival, live.deadline)
                   if status is Status.OK else now)
        result = EngineResult(
            request_id=live.rid, robot_id=live.robot_id, status=status, reason=reason,
            actions=actions, timings=live.timings, budget_ms=live.budget * MS_PER_S,
            submitted=live.submitted, finished=now, arrival=live.arrival,
            deadline=live.deadline, release_at=release, emulated=self._backend.emulated)
        if status is not Status.OK and status is not Status.SHED:
            self._note("request %d (%s) %s: %s", live.rid, live.robot_id, status.name, reason,
                       level=logging.INFO)
        if live.callback is not None:
            try:
                live.callback(result)
            except Exception:  # a faulty callback must not stop the engine
                self._note("result callback of request %d raised", live.rid,
                           level=logging.ERROR, exc_info=True)
        live.future.set_result(result)
