import pytest

from xinfer_ros.rtc.request_cycle import RequestCycle


def test_eq1_after_an_answer_and_at_once_after_a_timeout() -> None:
    cycle = RequestCycle(period=0.18, timeout=1.0)
    assert cycle.due(0.0)
    cycle.sent(1, 0.0)
    assert not cycle.due(0.5) and not cycle.expired(0.99)
    # Answered sooner than T_E: the next goes out at s + T_E; later: at once (Eq. 1).
    assert cycle.answered(0.05) is not None and cycle.next_send == pytest.approx(0.18)
    assert not cycle.due(0.17) and cycle.due(0.18)
    cycle.sent(2, 0.2)
    cycle.answered(0.6)
    assert cycle.next_send == pytest.approx(0.6)
    cycle.sent(3, 0.6)
    assert cycle.expired(1.6)
    flight = cycle.abandon(1.6)
    assert flight is not None and flight.seq == 3 and cycle.due(1.6)
    assert cycle.answered(1.7) is None and cycle.next_send == 1.6  # nothing in flight
