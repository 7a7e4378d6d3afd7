"""Run one node until SIGINT or SIGTERM and shut down cleanly."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence

import rclpy
from rclpy.executors import (
    Executor,
    ExternalShutdownException,
    MultiThreadedExecutor,
    SingleThreadedExecutor,
)
from rclpy.node import Node

__all__ = ["spin_node"]


def _make_executor(threads: int) -> Executor:
    # rclpy's experimental EventsExecutor would dispatch faster, but in Kilted it does
    # not return from spin() when a signal shuts the context down.
    if threads > 1:
        return MultiThreadedExecutor(num_threads=threads)
    return SingleThreadedExecutor()


def spin_node(factory: Callable[[], Node], argv: Sequence[str] | None = None,
              threads: int = 1) -> int:
    """Initialise rclpy with ``argv``, build the node and spin it.

    rclpy's default signal handlers turn SIGINT and SIGTERM into a context shutdown,
    which ends the spin with ``ExternalShutdownException``; process managers and
    Ctrl-C both stop nodes cleanly.

    Args:
        factory: Builds the node (after ``rclpy.init``).
        argv: Command line, ROS arguments included (default ``sys.argv``).
        threads: Executor threads; more than one lets callbacks of separate
            callback groups run concurrently.

    Returns:
        0 after a clean shutdown, 2 when the node rejected its parameters.
    """
    rclpy.init(args=list(sys.argv if argv is None else argv))
    try:
        node = factory()
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        rclpy.try_shutdown()
        return 2
    executor = _make_executor(threads)
    try:
        executor.add_node(node)
        executor.spin()
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    except Exception:
        # A multi-threaded executor may still be building a wait set when a signal
        # shuts the context down (rclpy raises RCLError then); that is a clean stop.
        if rclpy.ok():
            raise
    finally:
        executor.shutdown()
        close = getattr(node, "close", None)
        if callable(close):
            close()
        node.destroy_node()
        rclpy.try_shutdown()
    return 0
