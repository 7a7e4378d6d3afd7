"""Service calls from tests that survive a lost request or answer, as an operator's would.

A call to a freshly discovered service can go unanswered: a request sent before the
server's reader matched is lost, and Fast DDS drops a response when the client's
response reader has not matched within 100 ms (ros2/rmw_fastrtps#390), which on a busy
two-core runner can take longer. Full runs of the slow tests hit it twice, each after
30 s of waiting: on 2026-12-03 a server never saw its configure request, and on
2026-12-06 test_recovery's configure got no answer. So a query without an answer is
asked again, and after a transition without an answer (or refused) the node's own
``get_state`` decides: done when it shows the transition's goal, sent again only while
it shows the state the transition starts from, as ``ros2 lifecycle get`` then ``set``
would be (test/nodes/test_lifecycle_cli.py follows the same rule through the CLI).
"""

from __future__ import annotations

import time
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

#: Each transition, the primary state it starts from and the one it leads to.
_STEPS = ((Transition.TRANSITION_CONFIGURE, State.PRIMARY_STATE_UNCONFIGURED,
           State.PRIMARY_STATE_INACTIVE),
          (Transition.TRANSITION_ACTIVATE, State.PRIMARY_STATE_INACTIVE,
           State.PRIMARY_STATE_ACTIVE))

#: Lifecycle state ids from here up are transition states (configuring, ...).
_FIRST_TRANSITION_STATE = State.TRANSITION_STATE_CONFIGURING


def ask(client: Client, request: Any, wait: Wait, *, answer_s: float = 10.0,
        tries: int = 3, appear_s: float = 60.0) -> Any:
    """The answer to a query that may be asked more than once (no side effects).

    Args:
        client: the service's client.
        request: what to ask.
        wait: spins the client's executor (see ``Wait``).
        answer_s: how long one request waits for its answer.
        tries: requests before giving up.
        appear_s: how long to wait for the service to appear.

    Raises:
        AssertionError: the service never appeared or no try was answered.
    """
    assert client.wait_for_service(timeout_sec=appear_s), f"{client.srv_name} never appeared"
    for _ in range(tries):
        future = client.call_async(request)
        wait(future, answer_s)
        if future.done():
            return future.result()
    raise AssertionError(f"{client.srv_name}: no answer in {tries} tries")


def _primary_state(states: Client, wait: Wait, answer_s: float) -> int:
    """The node's state once it is out of any transition state (or the last one seen)."""
    end = time.monotonic() + 3 * answer_s
    while True:
        state = ask(states, GetState.Request(), wait, answer_s=answer_s).current_state.id
        if state < _FIRST_TRANSITION_STATE or time.monotonic() > end:
            return state
        time.sleep(0.1)


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
        AssertionError: a service never appeared, the node refused a transition or
            left it in another state, or no try brought it to the transition's goal.
    """
    client = node.create_client(ChangeState, f"{name}/change_state")
    states = node.create_client(GetState, f"{name}/get_state")
    assert client.wait_for_service(timeout_sec=60.0), f"{name} offers no change_state"
    try:
        for transition, start, goal in _STEPS:
            for _ in range(tries):
                future = client.call_async(
                    ChangeState.Request(transition=Transition(id=transition)))
                wait(future, answer_s)
                if future.done() and future.result().success:
                    break
                # No answer, or refused because an earlier, lost request already made it.
                state = _primary_state(states, wait, answer_s)
                if state == goal:
                    break
                assert state == start and not future.done(), (
                    f"{name}: transition {transition} "
                    f"{'refused' if future.done() else 'unanswered'} in state {state}")
            else:
                raise AssertionError(
                    f"{name}: no answer to transition {transition} in {tries} tries")
    finally:
        node.destroy_client(client)
        node.destroy_client(states)
