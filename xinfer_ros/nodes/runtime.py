"""Run one node until SIGINT or SIGTERM and shut down cleanly."""

from __future__ import annotations

import _thread
import faulthandler
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from types import FrameType

import rclpy
from rclpy.executors import (
    Executor,
    ExternalShutdownException,
    MultiThreadedExecutor,
    SingleThreadedExecutor,
)
from rclpy.node import Node
from rclpy.signals import SignalHandlerOptions, install_signal_handlers

from xinfer_ros.serving.params import EXECUTOR_PARAM, EXECUTORS

__all__ = ["EXECUTORS", "EXECUTOR_PARAM", "StopFlag", "keep_discovery_local", "make_executor",
           "ros_session", "spin_node"]



#: Longest the events executor waits before it checks for shutdown again (s).
_SHUTDOWN_POLL_S = 0.1
#: How often the start-up watcher looks for an interrupt a finaliser swallowed (s).
_LOST_POLL_S = 0.05


def keep_discovery_local() -> None:
    """Keep DDS discovery on this machine unless the user chose otherwise.

    rmw reads ``ROS_AUTOMATIC_DISCOVERY_RANGE`` when the context starts, so this runs
    before ``rclpy.init``: ``ros2 run`` and ``ros2 launch`` of these nodes stay on
    loopback by default. A fleet spread over several machines sets it (``SUBNET``).
    """
    os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")


def make_executor(kind: str, threads: int = 1) -> Executor:
    """An executor of ``kind`` (one of :data:`EXECUTORS`).

    Args:
        kind: 'events' or 'single'.
        threads: With 'single', more than one gives a MultiThreadedExecutor.
    """
    if kind == "events":
        from rclpy.experimental import EventsExecutor

        return EventsExecutor()
    if threads > 1:
        return MultiThreadedExecutor(num_threads=threads)
    return SingleThreadedExecutor()


def _executor_kind(node: Node) -> str:
    """The node's ``executor`` parameter, or 'single' for a node without one."""
    if node.has_parameter(EXECUTOR_PARAM.name):
        return str(node.get_parameter(EXECUTOR_PARAM.name).value)
    return "single"


class _SignalPipe:
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


class _StopWhileStarting(_SignalPipe):
    """Ctrl-C while the node is being built ends the process within :data:`STOP_GRACE_S`.

    Until the node exists Python's default applies: SIGINT raises KeyboardInterrupt in
    the main thread, and :func:`spin_node` returns 0. Python raises it only between
    bytecodes, though, and building a real-size model spends long single native calls
    (π0's 257k-token embedding takes 7 s to initialise here, and on a loaded CI runner
    one Ctrl-C went unanswered for over 40 s). Should the build still run
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

    def __init__(self) -> None:
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
                print(f"stopped while starting: the node was still being built "
                      f"{STOP_GRACE_S:g} s after the signal (inside a long native call)",
                      file=sys.stderr, flush=True)
                os._exit(0)

    def close(self) -> bool:
        """The node is built (or its build failed): disarm the watcher; idempotent.

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


class _StopOnSignal(_SignalPipe):
    """SIGINT and SIGTERM ask the events executor's spin loop to stop, and make sure it does.

    rclpy's own handlers shut the context down from inside the signal, while a
    callback may be publishing: the EventsExecutor then logs that callback's "context
    is invalid" error as FATAL. Here the signal only sets a flag; the loop stops
    between callbacks and the context is shut down after it.

    A main thread blocked inside rclpy's C++ (once in CI a process ignored SIGINT and
    SIGTERM for 15 s until launch killed it) would never see the flag, so the watcher
    of :class:`_SignalPipe` sets it too. Should the spin loop still run
    :data:`STOP_GRACE_S` after the signal, or the process still be alive
    :data:`TEARDOWN_GRACE_S` after it (the server drains its engine while it tears
    down), the watcher prints every thread's stack and ends the process: with status 1
    when the spin loop never returned, 0 when only the teardown hung (the node's work
    was over).
    """

    def __init__(self) -> None:
        self.requested = False
        self.loop_done = False
        super().__init__()
        self._previous = {sig: signal.signal(sig, self._on_signal)
                          for sig in (signal.SIGINT, signal.SIGTERM)}

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.requested = True

    def _on_stop_signal(self) -> None:
        self.requested = True  # the loop polls it (the events executor has no guard conditions)
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

        After a stop by signal, further SIGINT and SIGTERM are ignored instead: the
        process is on its way out, and a Ctrl-C reaches every node twice under launch
        (the terminal signals the whole process group, and launch forwards its own),
        which would otherwise turn a clean stop into death by signal (status -2).
        """
        for sig, handler in self._previous.items():
            signal.signal(sig, signal.SIG_IGN if self.requested else handler)
        self._close_pipe()


#: Seconds after SIGINT or SIGTERM within which the spin loop must return (launch
#: escalates to SIGTERM after 5 s).
STOP_GRACE_S = 4.0
#: Seconds after the signal within which the node must be torn down (launch sends
#: SIGKILL 15 s after SIGINT).
TEARDOWN_GRACE_S = 10.0


def _spin(executor: Executor, stop: _StopOnSignal | None) -> None:
    if stop is None:
        install_signal_handlers(SignalHandlerOptions.ALL)
        executor.spin()
        return
    # In Kilted, EventsExecutor.spin() does not return once the context is shut
    # down (it busy-loops on a core); spin_once() returns within a poll, and Python
    # runs the signal handler then (or between bytecodes of a callback).
    while not stop.requested and rclpy.ok():
        executor.spin_once(timeout_sec=_SHUTDOWN_POLL_S)
    stop.loop_done = True


def spin_node(factory: Callable[[], Node], argv: Sequence[str] | None = None,
              threads: int = 1) -> int:
    """Initialise rclpy with ``argv``, build the node and spin it.

    SIGINT and SIGTERM stop the spin and the node shuts down cleanly (exit status 0):
    under the SingleThreadedExecutor rclpy's signal handlers shut the context down,
    which ends the spin with ``ExternalShutdownException``; under the events executor
    the signal ends the spin loop first and the context is shut down after it. A node
    that declares the ``executor`` parameter (:data:`EXECUTOR_PARAM`) picks its
    executor; others get a SingleThreadedExecutor.

    Args:
        factory: Builds the node (after ``rclpy.init``).
        argv: Command line, ROS arguments included (default ``sys.argv``).
        threads: Executor threads; more than one lets callbacks of separate
            callback groups run concurrently (not with the events executor).

    Returns:
        0 after a clean shutdown, 2 when the node rejected its parameters.
    """
    # Signal handling is set up once the executor is known (_spin); until then Ctrl-C
    # raises KeyboardInterrupt, and a build stuck in native code ends by the watcher
    # of _StopWhileStarting.
    keep_discovery_local()
    rclpy.init(args=list(sys.argv if argv is None else argv),
               signal_handler_options=SignalHandlerOptions.NO)
    # One try from the build to the teardown: a Ctrl-C may land anywhere in between
    # (e.g. while the events executor's module is first imported, before its own
    # handler is installed), and is a clean stop wherever it does.
    node: Node | None = None
    executor: Executor | None = None
    stop: _StopOnSignal | None = None
    status = 0
    starting = _StopWhileStarting()
    try:
        try:
            node = factory()
        finally:
            owed = starting.close()
        if owed:
            raise KeyboardInterrupt
        kind = _executor_kind(node)
        executor = make_executor(kind, threads)
        stop = _StopOnSignal() if kind == "events" else None
        executor.add_node(node)
        _spin(executor, stop)
    except ValueError as exc:
        if node is None:  # the node rejected its parameters
            print(f"error: {exc}", file=sys.stderr)
            status = 2
        elif rclpy.ok():  # not the parameters: as any other error below
            raise
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    except Exception:
        # A multi-threaded executor may still be building a wait set when a signal
        # shuts the context down (rclpy raises RCLError then); that is a clean stop.
        if rclpy.ok():
            raise
    finally:
        starting.close()  # a no-op, unless an interrupt cut the first call short
        _teardown(executor, node, stop)
    return status


def _teardown(executor: Executor | None, node: Node | None,
              stop: _StopOnSignal | None) -> None:
    """Shut down what :func:`spin_node` got as far as making, then rclpy."""
    if executor is not None:
        executor.shutdown()
    if node is not None:
        close = getattr(node, "close", None)
        if callable(close):
            close()
        node.destroy_node()
    rclpy.try_shutdown()
    if stop is not None:
        stop.close()


class StopFlag:
    """Set by SIGINT/SIGTERM; the spin loop polls it (a handler must not do I/O).

    Use as a context manager: it installs itself for SIGINT and SIGTERM and restores
    the previous handlers on exit (tests call ``main`` in process).
    """

    def __init__(self) -> None:
        self.signal: int | None = None
        self._previous: dict[int, Callable[[int, FrameType | None], object] | int | None] = {}

    def __call__(self, signum: int, _frame: FrameType | None) -> None:
        """Remember the signal (the handler interface of :func:`signal.signal`)."""
        self.signal = signum

    def __enter__(self) -> StopFlag:
        for signum in (signal.SIGINT, signal.SIGTERM):
            self._previous[signum] = signal.signal(signum, self)
        return self

    def __exit__(self, *_exc: object) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)


@contextmanager
def ros_session() -> Iterator[StopFlag]:
    """Rclpy initialised without its signal handlers, and a :class:`StopFlag`.

    For command-line tools that drive ROS from a loop (record, replay): rclpy's own
    handlers would shut the context down at once and lose what DDS already delivered;
    the flag only records the signal, and the caller's loop winds down first.
    """
    rclpy.init(signal_handler_options=SignalHandlerOptions.NO)
    try:
        with StopFlag() as flag:
            yield flag
    finally:
        rclpy.try_shutdown()
