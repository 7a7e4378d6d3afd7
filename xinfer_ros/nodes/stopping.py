"""Stopping a node process on SIGINT or SIGTERM, wherever its main thread is.

Imports only the standard library: the node scripts use :func:`run_node_main` before
they import rclpy, torch or the model, so that a Ctrl-C during those imports stops the
process too (:mod:`xinfer_ros.nodes.runtime` uses the same guards around the build and
the spin).
"""

from __future__ import annotations

import _thread
import faulthandler
import importlib
import os
import signal
import sys
import threading
import time
from types import FrameType

__all__ = ["BACKSTOP_S", "STOP_GRACE_S", "TEARDOWN_GRACE_S", "StopOnSignal", "StopWhileStarting",
           "ignore_stop_signals", "run_node_main"]

#: Seconds after SIGINT or SIGTERM within which the spin loop must return (launch
#: escalates to SIGTERM after 5 s).
STOP_GRACE_S = 4.0
#: Seconds after the signal within which the node must be torn down (launch sends
#: SIGKILL 15 s after SIGINT).
TEARDOWN_GRACE_S = 10.0
#: Seconds after the signal at which faulthandler's own C thread dumps every stack and
#: ends a process whose main thread holds the GIL (the watchers cannot run then); before
#: launch's SIGKILL, so the stacks are printed.
BACKSTOP_S = 13.0
#: How often the start-up watcher looks for an interrupt a finaliser swallowed (s).
_LOST_POLL_S = 0.05


class SignalPipe:
    """The C-level signal handler also writes each signal's number to a pipe.

    A Python signal handler runs only when the main thread runs Python; a main thread
    blocked inside native code (rclpy's C++, or one tensor's random initialisation)
    never sees it. ``signal.set_wakeup_fd`` makes the C-level handler write to a pipe
    too, and a watcher thread woken by it acts for the main thread. Subclasses say what
    the watcher does (:meth:`_on_stop_signal`) once SIGINT or SIGTERM arrived.
    """

    def __init__(self) -> None:
        self._finished = threading.Event()
        self._read, self._write = os.pipe()
        os.set_blocking(self._write, False)
        self._previous_fd = signal.set_wakeup_fd(self._write)
        threading.Thread(target=self._watch, name="xinfer-stop-watch", daemon=True).start()

    def _watch(self) -> None:
        try:
            while True:
                data = os.read(self._read, 1)
                if not data:
                    return  # closed: the guarded phase ended
                if data[0] in (signal.SIGINT, signal.SIGTERM):
                    break
            self._on_stop_signal()
        finally:
            os.close(self._read)

    def _on_stop_signal(self) -> None:
        raise NotImplementedError

    def _close_pipe(self) -> None:
        self._finished.set()
        signal.set_wakeup_fd(self._previous_fd)
        os.close(self._write)  # ends the watcher's read


class StopWhileStarting(SignalPipe):
    """Ctrl-C while the node starts ends the process within :data:`STOP_GRACE_S`.

    Until the node exists Python's default applies: SIGINT raises KeyboardInterrupt in
    the main thread, and :func:`xinfer_ros.nodes.runtime.spin_node` returns 0. Python
    raises it only between bytecodes, though, and building a real-size model spends
    long single native calls (π0's 257k-token embedding takes 7 s to initialise here,
    and on a loaded CI runner one Ctrl-C went unanswered for over 40 s). Should the build still run
    :data:`STOP_GRACE_S` after the signal, the watcher says so and ends the process with
    status 0 (the user asked it to stop; nothing had been served). Action worker
    processes already started see their pipe close and exit.

    A KeyboardInterrupt raised inside a callback that cannot raise (a weakref callback
    such as importlib's module-lock cleanup, a ``__del__``) is handed to
    :data:`sys.unraisablehook`, which would print its traceback and let the build go
    on. While the build runs, that hook records the lost interrupt without printing,
    and the watcher raises it in the main thread again (:func:`_thread.interrupt_main`)
    a poll later; should the build end first, :meth:`close` says it is owed.
    """

    def __init__(self, doing: str = "the node was still being built") -> None:
        self._doing = doing  # what the grace's message says was still going on
        # Also when started with SIGINT ignored (a background job of a shell): the node
        # stops on SIGINT once it runs, as launch expects, so it does from the start. It
        # stays so until the spin installs its own handler (not restored on close: an
        # ignored SIGINT between the two would lose a Ctrl-C).
        signal.signal(signal.SIGINT, signal.default_int_handler)
        self._lost_at: float | None = None  # when a finaliser swallowed the interrupt
        self._closing = False  # set by close: the watcher raises nothing any more
        self._handover = threading.Lock()  # the owed interrupt goes to one side only
        super().__init__()
        self._previous_hook = sys.unraisablehook
        sys.unraisablehook = self._unraisable

    def _unraisable(self, unraisable: sys.UnraisableHookArgs) -> None:
        # No lock here, and the watcher waits a poll: raised while this hook runs, the
        # interrupt would be swallowed again (then recorded again, until the grace).
        if unraisable.exc_type is not None and issubclass(unraisable.exc_type,
                                                          KeyboardInterrupt):
            self._lost_at = time.monotonic()
            return
        self._previous_hook(unraisable)

    def _on_stop_signal(self) -> None:
        deadline = time.monotonic() + STOP_GRACE_S
        while not self._finished.wait(_LOST_POLL_S):
            with self._handover:
                lost_at = self._lost_at
                if (not self._closing and lost_at is not None
                        and time.monotonic() - lost_at >= _LOST_POLL_S):
                    self._lost_at = None
                    _thread.interrupt_main(signal.SIGINT)
            if time.monotonic() >= deadline:
                print(f"stopped while starting: {self._doing} {STOP_GRACE_S:g} s after "
                      "the signal (inside a long native call)",
                      file=sys.stderr, flush=True)
                os._exit(0)

    def close(self) -> bool:
        """The guarded phase ended (the node's import or build, done or failed).

        Disarms the watcher; idempotent.

        A second call finishes what an interrupt raised inside the first cut short.

        Returns:
            Whether an interrupt a finaliser swallowed is still owed (the build ended
            within one poll of it): the caller raises KeyboardInterrupt.
        """
        with self._handover:
            self._closing = True
            owed, self._lost_at = self._lost_at is not None, None
        if not self._finished.is_set():
            sys.unraisablehook = self._previous_hook
            self._close_pipe()
        return owed


class StopOnSignal(SignalPipe):
    """SIGINT and SIGTERM ask a node's spin loop to stop, and make sure it does.

    rclpy's own handlers shut the context down from inside the signal, while a
    callback may be publishing: the EventsExecutor then logs that callback's "context
    is invalid" error as FATAL, and a SingleThreadedExecutor node crashed (SIGSEGV)
    destroying a subscription afterwards in 1 of 40 tries. Here the signal only sets a
    flag; the loop stops between callbacks, the node is destroyed, and the context is
    shut down after it.

    A main thread blocked inside rclpy's C++ (once in CI a process ignored SIGINT and
    SIGTERM for 15 s until launch killed it) would never see the flag, so the watcher
    of :class:`SignalPipe` sets it too. Should the spin loop still run
    :data:`STOP_GRACE_S` after the signal, or the process still be alive
    :data:`TEARDOWN_GRACE_S` after it (the server drains its engine while it tears
    down), the watcher prints every thread's stack and ends the process: with status 1
    when the spin loop never returned, 0 when only the teardown hung (the node's work
    was over). A native call that holds the GIL starves the watcher too (once in a
    slow-test run a robot_sim printed nothing for 15 s after SIGINT and launch killed
    it); for that, faulthandler dumps the stacks and exits with status 1 at
    :data:`BACKSTOP_S`.
    """

    def __init__(self) -> None:
        self.requested = False
        self.loop_done = False
        super().__init__()
        self._previous = {sig: signal.signal(sig, self._on_signal)
                          for sig in (signal.SIGINT, signal.SIGTERM)}

    def _stop_requested(self) -> None:
        # Armed by whichever side sees the signal first; a repeat would only move the timer.
        if not self.requested:
            # File descriptor 2: sys.stderr may be a stream without one (pytest's capsys).
            faulthandler.dump_traceback_later(BACKSTOP_S, exit=True, file=2)
        self.requested = True

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._stop_requested()

    def _on_stop_signal(self) -> None:
        # The loop polls the flag between spin slices.
        self._stop_requested()
        if self._finished.wait(STOP_GRACE_S):
            return
        grace = STOP_GRACE_S
        if self.loop_done:
            grace = TEARDOWN_GRACE_S
            if self._finished.wait(TEARDOWN_GRACE_S - STOP_GRACE_S):
                return
        print(f"error: the node did not stop within {grace:g} s of the signal "
              f"({'teardown' if self.loop_done else 'the executor'} hung); threads:",
              file=sys.stderr, flush=True)
        faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
        os._exit(0 if self.loop_done else 1)

    def close(self) -> None:
        """The node stopped: disarm the watcher, restore the previous signal handling.

        After a stop by signal, further SIGINT and SIGTERM are ignored instead
        (:func:`ignore_stop_signals`).
        """
        faulthandler.cancel_dump_traceback_later()
        if self.requested:
            ignore_stop_signals()
        else:
            for sig, handler in self._previous.items():
                signal.signal(sig, handler)
        self._close_pipe()


def run_node_main(module: str) -> int:
    """Import ``module`` and run its ``main()``, a Ctrl-C during the import included.

    The node scripts call this first thing: importing a node pulls in rclpy, torch and
    transformers (seconds), and a process started with SIGINT ignored (a background job
    of a shell script) would otherwise lose a Ctrl-C sent meanwhile and go on to serve.
    The import runs under :class:`StopWhileStarting`, so the signal stops it as it
    stops a node's build. A KeyboardInterrupt out of ``main()`` (a Ctrl-C after the
    import, before :func:`xinfer_ros.nodes.runtime.spin_node` guards the node's start
    again) is a stop too.

    Args:
        module: Dotted name of a module with ``main() -> int``.

    Returns:
        ``main()``'s exit status, or 0 when a Ctrl-C stopped it.
    """
    starting = StopWhileStarting("the node's modules were still being imported")
    try:
        try:
            main = importlib.import_module(module).main
        finally:
            owed = starting.close()
        if owed:
            raise KeyboardInterrupt
        status: int = main()
    except KeyboardInterrupt:
        ignore_stop_signals()
        return 0  # the user asked it to stop before it served
    finally:
        starting.close()  # a no-op, unless an interrupt cut the first call short
    return status


def ignore_stop_signals() -> None:
    """Ignore further SIGINT and SIGTERM: after a stop the process is on its way out.

    Under launch a Ctrl-C reaches every node twice (the terminal signals the whole
    process group, and launch forwards its own); the second would turn a clean stop
    into death by signal (status -2) or a traceback during the interpreter's exit.
    """
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
