"""The test helper that activates lifecycle nodes sends a lost transition again, once."""

import pytest

pytest.importorskip("rclpy")
from lifecycle_msgs.msg import State, Transition
from lifecycle_msgs.srv import ChangeState, GetState
from rclpy.task import Future

from .service_calls import ask, configure_and_activate


class _Lifecycle:
    """A node's lifecycle services whose answers to the first ``lose`` requests are lost."""

    def __init__(self, lose: int, fail: bool = False) -> None:
        self.state, self.lose, self.fail = State.PRIMARY_STATE_UNCONFIGURED, lose, fail
        self.sent: list[int] = []

    def change(self, request: ChangeState.Request) -> Future:
        self.sent.append(request.transition.id)
        goal = {Transition.TRANSITION_CONFIGURE: State.PRIMARY_STATE_INACTIVE,
                Transition.TRANSITION_ACTIVATE: State.PRIMARY_STATE_ACTIVE}
        future = Future()
        if not self.fail:
            self.state = goal[request.transition.id]
        if self.lose:
            self.lose -= 1
        else:
            future.set_result(ChangeState.Response(success=not self.fail))
        return future

    def get(self, _request: GetState.Request) -> Future:
        future = Future()
        future.set_result(GetState.Response(current_state=State(id=self.state)))
        return future


class _Client:
    def __init__(self, call) -> None:
        self.call_async = call

    def wait_for_service(self, timeout_sec: float) -> bool:
        return True


class _Node:
    def __init__(self, lifecycle: _Lifecycle) -> None:
        self.lifecycle = lifecycle

    def create_client(self, kind, _name: str) -> _Client:
        return _Client(self.lifecycle.change if kind is ChangeState else self.lifecycle.get)

    def destroy_client(self, _client: _Client) -> None:
        pass


def _nothing(_future: Future, _seconds: float) -> None:
    pass


def test_a_lost_answer_is_read_from_get_state_not_sent_again() -> None:
    lifecycle = _Lifecycle(lose=2)
    configure_and_activate(_Node(lifecycle), "/n", _nothing)
    assert lifecycle.sent == [Transition.TRANSITION_CONFIGURE, Transition.TRANSITION_ACTIVATE]
    assert lifecycle.state == State.PRIMARY_STATE_ACTIVE


def test_a_transition_the_node_never_made_is_sent_again_then_given_up() -> None:
    lifecycle = _Lifecycle(lose=5, fail=True)
    with pytest.raises(AssertionError, match="in 3 tries"):
        configure_and_activate(_Node(lifecycle), "/n", _nothing)
    assert lifecycle.sent == [Transition.TRANSITION_CONFIGURE] * 3


def test_a_failed_transition_is_reported() -> None:
    with pytest.raises(AssertionError, match="failed"):
        configure_and_activate(_Node(_Lifecycle(lose=0, fail=True)), "/n", _nothing)


def test_a_query_without_an_answer_is_asked_again() -> None:
    lifecycle = _Lifecycle(lose=0)
    calls: list[GetState.Request] = []

    def lost_once(request: GetState.Request) -> Future:
        calls.append(request)
        return Future() if len(calls) == 1 else lifecycle.get(request)

    client = _Client(lost_once)
    client.srv_name = "/n/get_state"
    answer = ask(client, GetState.Request(), _nothing)
    assert len(calls) == 2 and answer.current_state.id == State.PRIMARY_STATE_UNCONFIGURED
    silent = _Client(lambda _request: Future())
    silent.srv_name = "/n/get_state"
    with pytest.raises(AssertionError, match="/n/get_state: no answer in 3 tries"):
        ask(silent, GetState.Request(), _nothing)
