"""The tests' service helpers: a lost request or answer is recovered, a refusal reported."""

import pytest

pytest.importorskip("rclpy")
from lifecycle_msgs.msg import State, Transition
from lifecycle_msgs.srv import ChangeState, GetState
from rclpy.task import Future

from .service_calls import ask, configure_and_activate

CONFIGURE, ACTIVATE = Transition.TRANSITION_CONFIGURE, Transition.TRANSITION_ACTIVATE
UNCONFIGURED, INACTIVE, ACTIVE = (State.PRIMARY_STATE_UNCONFIGURED, State.PRIMARY_STATE_INACTIVE,
                                  State.PRIMARY_STATE_ACTIVE)
#: What a lifecycle node does with each transition: from which state, to which.
MOVES = {CONFIGURE: (UNCONFIGURED, INACTIVE), ACTIVATE: (INACTIVE, ACTIVE)}


class _Lifecycle:
    """A lifecycle node's two services, as rclpy's: a transition from another state fails.

    Args:
        lost: change_state answers lost (the transition is made, its answer never comes).
        queued: change_state requests held unanswered until the next one comes, as in a
            node that is not spinning yet; then both are served in order.
        fail: transitions fail (the node stays where it was).
        lost_states: get_state answers lost.
    """

    def __init__(self, lost: int = 0, queued: int = 0, fail: bool = False,
                 lost_states: int = 0) -> None:
        self.state, self.lost, self.queued, self.fail = UNCONFIGURED, lost, queued, fail
        self.lost_states = lost_states
        self.sent: list[int] = []
        self._held: list[tuple[int, Future]] = []

    def change(self, request: ChangeState.Request) -> Future:
        transition = request.transition.id
        self.sent.append(transition)
        future = Future()
        if self.queued:
            self.queued -= 1
            self._held.append((transition, future))
            return future
        for held, answer in self._held:
            answer.set_result(self._serve(held))
        self._held = []
        response = self._serve(transition)
        if self.lost:
            self.lost -= 1
        else:
            future.set_result(response)
        return future

    def _serve(self, transition: int) -> ChangeState.Response:
        start, goal = MOVES[transition]
        ok = self.state == start and not self.fail
        if ok:
            self.state = goal
        return ChangeState.Response(success=ok)

    def get(self, _request: GetState.Request) -> Future:
        future = Future()
        if self.lost_states:
            self.lost_states -= 1
        else:
            future.set_result(GetState.Response(current_state=State(id=self.state)))
        return future


class _Client:
    def __init__(self, call, name: str) -> None:
        self.call_async, self.srv_name = call, name

    def wait_for_service(self, timeout_sec: float) -> bool:
        return True


class _Node:
    def __init__(self, lifecycle: _Lifecycle) -> None:
        self.lifecycle = lifecycle

    def create_client(self, kind, name: str) -> _Client:
        return _Client(self.lifecycle.change if kind is ChangeState else self.lifecycle.get,
                       name)

    def destroy_client(self, _client: _Client) -> None:
        pass


def _nothing(_future: Future, _seconds: float) -> None:
    pass


def _activate(lifecycle: _Lifecycle) -> None:
    configure_and_activate(_Node(lifecycle), "/n", _nothing)


def test_a_lost_answer_is_read_from_get_state_not_sent_again() -> None:
    lifecycle = _Lifecycle(lost=2, lost_states=1)
    _activate(lifecycle)
    assert lifecycle.sent == [CONFIGURE, ACTIVATE] and lifecycle.state == ACTIVE


def test_a_request_the_node_had_not_served_yet_is_sent_again_and_its_refusal_taken() -> None:
    # The first configure waits in the node's queue; get_state shows it still
    # unconfigured, so configure goes again; the node then serves both: the first
    # configures it, the second is refused as from the wrong state, and get_state says
    # inactive.
    lifecycle = _Lifecycle(queued=1)
    _activate(lifecycle)
    assert lifecycle.sent == [CONFIGURE, CONFIGURE, ACTIVATE] and lifecycle.state == ACTIVE


def test_a_transition_never_served_is_sent_three_times_then_given_up() -> None:
    lifecycle = _Lifecycle(queued=5)
    with pytest.raises(AssertionError, match="no answer to transition 1 in 3 tries"):
        _activate(lifecycle)
    assert lifecycle.sent == [CONFIGURE] * 3


def test_a_failed_transition_is_reported_with_the_state() -> None:
    with pytest.raises(AssertionError, match="transition 1 refused in state 1"):
        _activate(_Lifecycle(fail=True))


def test_a_query_without_an_answer_is_asked_again() -> None:
    lifecycle = _Lifecycle(lost_states=1)
    answer = ask(_Client(lifecycle.get, "/n/get_state"), GetState.Request(), _nothing)
    assert answer.current_state.id == UNCONFIGURED
    with pytest.raises(AssertionError, match="/n/get_state: no answer in 3 tries"):
        ask(_Client(_Lifecycle(lost_states=3).get, "/n/get_state"), GetState.Request(),
            _nothing)
