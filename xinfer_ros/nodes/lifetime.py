"""A node's rcl resources end when the node is destroyed, never in the garbage collector.

rclpy leaves two ways for an rcl node to outlive the call that should end it:

* A node that rejects an invalid parameter raises from its ``__init__`` after rclpy's
  ``Node.__init__`` has created the rcl node (and, for the server, threads). The caller
  never gets the object, and rclpy's context shutdown does not reliably destroy it: it
  destroys the nodes it tracks by iterating the very list each ``destroy_node`` removes
  its node from, so with two or more tracked nodes it skips every other one (rclpy as
  installed here; the same pattern was fixed once before in ros2/rclpy#94).
* ``LifecycleNode.destroy_node`` never destroys the node's lifecycle state machine,
  which holds the rcl node: the node stays in the ROS graph (and keeps its rosout
  publisher) until the garbage collector frees the Python object.

Left to the cyclic garbage collector, ``rcl_node_fini`` runs at whatever allocation
triggers a collection, after the context has shut down; there it also destroys the DDS
participant of that context. In ``make test`` that once hung the process inside Fast
DDS (``DomainParticipant::set_listener`` spinning), where no Python timeout reaches.

So every node class decorates its ``__init__`` with :func:`destroyed_on_failure`, and
the lifecycle nodes derive from :class:`LifecycleNode` here.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Concatenate, ParamSpec, TypeVar

from rclpy import lifecycle
from rclpy.node import Node

__all__ = ["LifecycleNode", "destroyed_on_failure", "end_state_machine"]

_N = TypeVar("_N", bound=Node)
_P = ParamSpec("_P")


class LifecycleNode(lifecycle.LifecycleNode):
    """rclpy's lifecycle node, whose ``destroy_node`` also ends its state machine."""

    def destroy_node(self) -> None:
        """Destroy the node's entities, then the state machine that holds the rcl node."""
        super().destroy_node()
        # After the node's own entities: the lifecycle services rclpy destroyed above
        # wrap the state machine's, which it finalises with the rcl node.
        end_state_machine(self)


def end_state_machine(node: lifecycle.LifecycleNode) -> None:
    """Destroy ``node``'s lifecycle state machine, which holds its rcl node, and drop it.

    The machine is absent when rclpy's own constructor raised before making it. rclpy's
    lifecycle calls read a destroyed machine's pointer unchecked (a crash, not an
    error), so the node drops it: a later call fails on None instead.
    """
    machine = getattr(node, "_state_machine", None)
    node._state_machine = None  # type: ignore[assignment]
    if machine is not None:
        machine.destroy_when_not_in_use()


def destroyed_on_failure(
        init: Callable[Concatenate[_N, _P], None]) -> Callable[Concatenate[_N, _P], None]:
    """Wrap a node's ``__init__`` so that a failed construction leaves nothing behind.

    When ``init`` raises, the node's ``abandon()`` runs first, if it has one (it stops
    whatever the constructor started and must tolerate attributes not yet set), then
    ``destroy_node()`` if rclpy got as far as creating the rcl node. The constructor's
    exception is re-raised unchanged; an error while undoing is added to it as a note.

    Args:
        init: The node class's ``__init__``.

    Returns:
        The wrapped ``__init__``.
    """
    @functools.wraps(init)
    def wrapper(self: _N, /, *args: _P.args, **kwargs: _P.kwargs) -> None:
        try:
            init(self, *args, **kwargs)
        except BaseException as exc:
            try:
                _abandon(self)
            except Exception as undo:  # the constructor's error is the one to report
                exc.add_note(f"and undoing the construction failed: {undo!r}")
            raise

    return wrapper


def _abandon(node: Node) -> None:
    """Undo a construction that raised, as far as it got."""
    abandon = getattr(type(node), "abandon", None)
    try:
        if callable(abandon):
            abandon(node)
    finally:
        try:
            handle = node.handle  # set once Node.__init__ created the rcl node
        except AttributeError:
            pass
        else:
            try:
                node.destroy_node()
            except Exception:
                # rclpy's own constructor raised part-way (its destroy_node expects
                # every entity it makes): free the rcl node at least.
                handle.destroy_when_not_in_use()
                raise
