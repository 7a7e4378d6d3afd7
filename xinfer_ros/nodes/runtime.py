"""Run one node until SIGINT or SIGTERM and shut down cleanly."""

from __future__ import annotations

import os
import signal
import sys
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
from rclpy.signals import SignalHandlerOptions

from xinfer_ros.nodes.stopping import StopOnSignal, StopWhileStarting, ignore_stop_signals
from xinfer_ros.serving.params import EXECUTOR_PARAM, EXECUTORS

__all__ = ["EXECUTORS", "EXECUTOR_PARAM", "StopFlag", "keep_discovery_local", "make_executor",
           "ros_session", "spin_node"]


#: Longest a spin slice waits before the loop checks for a stop again (s).
_SHUTDOWN_POLL_S = 0.1


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


def _spin(executor: Executor, stop: StopOnSignal) -> None:
    # Every executor spins in slices until the signal's flag is set (StopOnSignal says
    # why not rclpy's handlers); the node is then destroyed while its context is still
    # up. In Kilted EventsExecutor.spin() never returns once the context is shut down
    # (it busy-loops on a core); spin_once() returns within a poll, and Python runs the
    # signal handler then (or between bytecodes of a callback).
    while not stop.requested and rclpy.ok():
        executor.spin_once(timeout_sec=_SHUTDOWN_POLL_S)
    stop.loop_done = True


def spin_node(factory: Callable[[], Node], argv: Sequence[str] | None = None,
              threads: int = 1) -> int:
    """Initialise rclpy with ``argv``, build the node and spin it.

    SIGINT and SIGTERM stop the spin and the node shuts down cleanly (exit status 0):
    the signal ends the spin loop (:class:`StopOnSignal`), the node is destroyed, and
    the context is shut down after it, whichever the executor. A node
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
    # Signal handling is set up once the node is built (StopOnSignal); until then Ctrl-C
    # raises KeyboardInterrupt, and a build stuck in native code ends by the watcher
    # of StopWhileStarting.
    node: Node | None = None
    executor: Executor | None = None
    stop: StopOnSignal | None = None
    status = 0
    starting = StopWhileStarting()  # before rclpy.init: a Ctrl-C there stops too
    try:
        keep_discovery_local()
        rclpy.init(args=list(sys.argv if argv is None else argv),
                   signal_handler_options=SignalHandlerOptions.NO)
    except KeyboardInterrupt:
        starting.close()
        ignore_stop_signals()
        rclpy.try_shutdown()
        return 0
    except BaseException:
        starting.close()  # e.g. invalid ROS arguments: rclpy's error, unchanged
        raise
    # One try from the build to the teardown: a Ctrl-C may land anywhere in between
    # (e.g. while the events executor's module is first imported, before its own
    # handler is installed), and is a clean stop wherever it does.
    try:
        try:
            node = factory()
        finally:
            owed = starting.close()
        if owed:
            raise KeyboardInterrupt
        executor = make_executor(_executor_kind(node), threads)
        stop = StopOnSignal()
        executor.add_node(node)
        _spin(executor, stop)
    except ValueError as exc:
        if node is None:  # the node rejected its parameters
            print(f"error: {exc}", file=sys.stderr)
            status = 2
        elif rclpy.ok():  # not the parameters: as any other error below
            raise
    except KeyboardInterrupt:
        ignore_stop_signals()  # the stop StopOnSignal's close would ignore after
    except ExternalShutdownException:
        pass  # the context was shut down by someone else (our signals never do)
    except Exception:
        # An executor may still be building a wait set when the context is shut down
        # under it (rclpy raises RCLError then); that is a clean stop.
        if rclpy.ok():
            raise
    finally:
        starting.close()  # a no-op, unless an interrupt cut the first call short
        _teardown(executor, node, stop)
    return status


def _teardown(executor: Executor | None, node: Node | None,
              stop: StopOnSignal | None) -> None:
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
