"""A small timed-release scheduler: run callables at given ``time.monotonic()`` instants.

The inference server uses it to publish phase-spread responses later than they are
ready (:mod:`xinfer_ros.core.phase_spread`). It imports no ROS: one daemon thread, a
heap of ``(time, seq, callable)`` and a :class:`threading.Condition`.

Callables due at the same time run in the order they were scheduled. A callable that
raises is reported to ``on_error`` (default: logged) and the thread goes on with the
next one. :meth:`ReleaseScheduler.close` stops the thread; what is still pending then is
run at once (``run_pending=True``, early but never lost) or dropped, as the caller
chooses. After ``close`` :meth:`~ReleaseScheduler.schedule` refuses new work and
returns ``False``, so a caller can do the work itself instead.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable

__all__ = ["ReleaseScheduler"]

_log = logging.getLogger(__name__)


def _log_error(exc: BaseException) -> None:
    _log.error("release callback failed", exc_info=exc)


class ReleaseScheduler:
    """Runs callables at ``time.monotonic()`` instants on one daemon thread.

    Args:
        name: The thread's name.
        on_error: Called with the exception when a callable raises (default: logged
            with :mod:`logging`); an exception in ``on_error`` itself is ignored.
        clock: The clock the instants are read on (``time.monotonic``).
    """

    def __init__(self, name: str = "release", on_error: Callable[[BaseException], None]
                 | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._on_error = on_error or _log_error
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = itertools.count()
        self._closed = False
        self._run_pending = False
        #: Callables run (raised or not), raised, and dropped by ``close``.
        self.ran = 0
        self.errors = 0
        self.dropped = 0
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    @property
    def pending(self) -> int:
        """Callables scheduled and not yet run."""
        with self._cond:
            return len(self._heap)

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` has been called."""
        return self._closed

    def schedule(self, at: float, fn: Callable[[], None]) -> bool:
        """Run ``fn()`` on the scheduler's thread at ``at`` (a past ``at``: at once).

        Returns:
            ``True`` when scheduled; ``False`` after :meth:`close` (``fn`` is not run).
        """
        with self._cond:
            if self._closed:
                return False
            heapq.heappush(self._heap, (float(at), next(self._seq), fn))
            self._cond.notify()
        return True

    def close(self, run_pending: bool = False, timeout: float = 2.0) -> int:
        """Stop the thread; run what is pending at once, or drop it.

        Args:
            run_pending: Run the pending callables now (in time order) instead of
                dropping them.
            timeout: How long to wait for the thread (s).

        Returns:
            The number of callables dropped (0 with ``run_pending``).
        """
        with self._cond:
            if not self._closed:
                self._closed = True
                self._run_pending = run_pending
                self._cond.notify()
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout)
        return self.dropped

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._closed:
                    if self._heap:
                        wait = self._heap[0][0] - self._clock()
                        if wait <= 0:
                            break
                        self._cond.wait(wait)
                    else:
                        self._cond.wait()
                if self._closed:
                    rest = [heapq.heappop(self._heap)[2] for _ in range(len(self._heap))]
                    if not self._run_pending:
                        self.dropped += len(rest)
                        rest = []
                else:
                    rest = [heapq.heappop(self._heap)[2]]
                done = self._closed
            for fn in rest:
                self._run(fn)
            if done:
                return

    def _run(self, fn: Callable[[], None]) -> None:
        self.ran += 1
        try:
            fn()
        except Exception as exc:
            self.errors += 1
            # The error handler's own failure must not stop the thread either.
            with contextlib.suppress(Exception):
                self._on_error(exc)
