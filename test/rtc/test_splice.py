import numpy as np
import pytest

from xinfer_ros.rtc.splice import ActionQueue, SpliceError, SpliceOutcome

D = 3


def ramp(start: float, n: int = 16) -> np.ndarray:
    return np.repeat((start + np.arange(n, dtype=float))[:, None], D, axis=1)


def run_ticks(queue: ActionQueue, first: int, count: int) -> list[float]:
    return [queue.pop(t)[0][0] for t in range(first, first + count)]


def test_on_time_chunk_is_applied_at_current_tick_not_from_start() -> None:
    q = ActionQueue(D)
    first = q.splice(ramp(0), send_tick=0, now_tick=0, commit_steps=8)
    assert first.outcome is SpliceOutcome.ON_TIME
    run_ticks(q, 0, 5)
    # Request sent at tick 5, answered at tick 9 (d = 8 -> handoff at 13: on time).
    new = ramp(100)
    result = q.splice(new, send_tick=5, now_tick=9, commit_steps=8)
    assert result.outcome is SpliceOutcome.ON_TIME
    assert result.applied_from == 4 and result.lateness_ticks == -4
    # Tick 9 executes keyframe 4 of the new chunk, never keyframe 0.
    assert run_ticks(q, 9, 3) == [104.0, 105.0, 106.0]


def test_late_chunk_counts_handoff_violation_and_is_aligned() -> None:
    q = ActionQueue(D)
    q.splice(ramp(0), 0, 0, 8)
    run_ticks(q, 0, 12)
    result = q.splice(ramp(50), send_tick=2, now_tick=12, commit_steps=8)
    assert result.outcome is SpliceOutcome.LATE and result.lateness_ticks == 2
    assert q.counters.handoff_violations == 1
    assert run_ticks(q, 12, 1) == [60.0]


def test_stale_and_out_of_order_chunks_are_dropped() -> None:
    q = ActionQueue(D)
    q.splice(ramp(0), 0, 0, 8)
    run_ticks(q, 0, 20)
    stale = q.splice(ramp(7), send_tick=1, now_tick=20, commit_steps=8)
    assert stale.outcome is SpliceOutcome.STALE
    assert q.counters.stale_chunks == 1
    q.splice(ramp(200), send_tick=18, now_tick=20, commit_steps=8)
    older = q.splice(ramp(300), send_tick=10, now_tick=20, commit_steps=8)
    assert older.outcome is SpliceOutcome.OUT_OF_ORDER
    assert run_ticks(q, 20, 1) == [202.0]


def test_starvation_holds_last_command() -> None:
    q = ActionQueue(D)
    q.splice(ramp(0, n=4), 0, 0, 2)
    cmds = run_ticks(q, 0, 7)
    assert cmds == [0.0, 1.0, 2.0, 3.0, 3.0, 3.0, 3.0]
    assert q.counters.starved_ticks == 3 and q.counters.ticks == 7


def test_planned_prefix_is_what_would_execute() -> None:
    q = ActionQueue(D)
    q.splice(ramp(0, n=10), 0, 0, 8)
    run_ticks(q, 0, 4)
    prev = q.planned(tick=4, horizon=8)
    np.testing.assert_array_equal(prev[:6, 0], [4, 5, 6, 7, 8, 9])
    np.testing.assert_array_equal(prev[6:, 0], [9, 9])  # repeats the last plan


def test_frozen_prefix_gives_continuous_handoff() -> None:
    q = ActionQueue(D)
    q.splice(ramp(0), 0, 0, 8)
    run_ticks(q, 0, 3)
    prev = q.planned(tick=3, horizon=16)
    new = prev.copy()
    new[8:] += 50.0  # the policy may change only what lies past the commit
    run_ticks(q, 3, 3)  # ticks 3..5 execute while the request is in flight
    result = q.splice(new, send_tick=3, now_tick=6, commit_steps=8)
    assert result.discontinuity == pytest.approx(1.0)  # one ramp step, no jump


def test_bad_input_is_rejected() -> None:
    q = ActionQueue(D)
    with pytest.raises(SpliceError, match="shape"):
        q.splice(np.zeros((16, D + 1)), 0, 0, 8)
    with pytest.raises(SpliceError, match="NaN"):
        q.splice(np.full((16, D), np.nan), 0, 0, 8)
    with pytest.raises(SpliceError, match="after now_tick"):
        q.splice(ramp(0), 5, 4, 8)
    with pytest.raises(SpliceError, match="action_dim"):
        ActionQueue(0)
