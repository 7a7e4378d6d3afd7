"""Service calls from tests that survive a lost first answer, as an operator's would.

A first call to a freshly discovered service can go unanswered: Fast DDS waits 100 ms
for the client's response reader to match before it drops the response
(ros2/rmw_fastrtps#390), and on a busy two-core runner discovery can take longer. It
happened twice in full runs of the slow tests (2026-12-03 in the launch test, 2026-12-06
in test_recovery, each after 30 s of waiting). So a query without an answer is asked
again, and a lifecycle transition without one is followed by ``get_state``: it is sent
again only while the node is still before it, as ``ros2 lifecycle get`` then ``set``
would be.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from lifecycle_msgs.msg import State, Transition
from lifecycle_msgs.srv import ChangeState, GetState
from rclpy.client import Client
from rclpy.node import Node
from rclpy.task import Future

__all__ = ["ask", "configure_and_activate"]

#: Spins whatever executor holds the client's node until the future is done or the
#: seconds have passed.
Wait = Callable[[Future, float], None]

#: Each transition and the primary state it leads to.
_STEPS = ((Transition.TRANSITION_CONFIGURE, State.PRIMARY_STATE_INACTIVE),
          (Transition.TRANSITION_ACTIVATE, State.PRIMARY_STATE_ACTIVE))


def ask(client: Client, request: Any, wait: Wait, *, answer_s: float = 10.0,
        tries: int = 3) -> Any:
    """The answer to a query that may be asked more than once (no side effects).

    Raises:
        AssertionError: the service never appeared or no try was answered.
    """
    assert client.wait_for_service(timeout_sec=60.0), f"{client.srv_name} never appeared"
    for _ in range(tries):
        future = client.call_async(request)
        wait(future, answer_s)
        if future.done():
            return future.result()
    raise AssertionError(f"{client.srv_name}: no answer in {tries} tries")


def configure_and_activate(node: Node, name: str, wait: Wait, *,
                           answer_s: float = 10.0, tries: int = 3) -> None:
    """Brings ``name`` from unconfigured to active.

    Args:
        node: the node the clients are made on.
        name: the lifecycle node's full name, e.g. ``/inference_server``.
        wait: spins whatever executor holds ``node`` (see ``Wait``).
        answer_s: how long one request waits for its answer.
        tries: requests per transition before giving up.

    Raises:
        AssertionError: a service never appeared, a transition failed, or no try
            brought the node to the transition's state.
    """
    client = node.create_client(ChangeState, f"{name}/change_state")
    states = node.create_client(GetState, f"{name}/get_state")
    assert client.wait_for_service(timeout_sec=60.0), f"{name} offers no change_state"
    assert states.wait_for_service(timeout_sec=60.0), f"{name} offers no get_state"
    try:
        for transition, goal in _STEPS:
            for _ in range(tries):
                future = client.call_async(
                    ChangeState.Request(transition=Transition(id=transition)))
                wait(future, answer_s)
                if future.done():
                    assert future.result().success, f"{name}: transition {transition} failed"
                    break
                now = states.call_async(GetState.Request())
                wait(now, answer_s)
                if now.done() and now.result().current_state.id == goal:
                    break
            else:
                raise AssertionError(
                    f"{name}: no answer to transition {transition} in {tries} tries")
    finally:
        node.destroy_client(client)
        node.destroy_client(states)
