"""The timed-release scheduler behind the server's phase spreading (ROS-free)."""

from __future__ import annotations

import threading
import time

import pytest

from xinfer_ros.serving.release import ReleaseScheduler


def _wait(predicate, timeout: float = 2.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.001)
    return predicate()


@pytest.mark.timeout(10)
def test_callables_run_in_time_order_and_not_early() -> None:
    sched = ReleaseScheduler()
    ran: list[tuple[str, float]] = []
    now = time.monotonic()
    due = {"c": now + 0.06, "a": now + 0.02, "b": now + 0.04, "past": now - 1.0}
    for name, at in due.items():
        assert sched.schedule(at, lambda n=name: ran.append((n, time.monotonic())))
    assert _wait(lambda: len(ran) == 4)
    assert [n for n, _ in ran] == ["past", "a", "b", "c"]
    for name, t in ran:
        assert t >= due[name]
        assert t - max(due[name], now) < 0.05  # on time, give or take a busy machine
    assert sched.pending == 0 and sched.ran == 4
    sched.close()


@pytest.mark.timeout(10)
def test_same_time_keeps_scheduling_order() -> None:
    sched = ReleaseScheduler()
    ran: list[int] = []
    at = time.monotonic() + 0.02
    for i in range(20):
        sched.schedule(at, lambda i=i: ran.append(i))
    assert _wait(lambda: len(ran) == 20)
    assert ran == list(range(20))
    sched.close()


@pytest.mark.timeout(10)
def test_an_earlier_item_scheduled_later_wakes_the_thread() -> None:
    sched = ReleaseScheduler()
    ran: list[str] = []
    sched.schedule(time.monotonic() + 5.0, lambda: ran.append("late"))
    t0 = time.monotonic()
    sched.schedule(t0 + 0.01, lambda: ran.append("soon"))
    assert _wait(lambda: ran == ["soon"], timeout=1.0)
    assert time.monotonic() - t0 < 1.0
    assert sched.close() == 1 and ran == ["soon"]  # "late" dropped


@pytest.mark.timeout(10)
def test_exceptions_are_reported_and_the_thread_goes_on() -> None:
    errors: list[BaseException] = []
    sched = ReleaseScheduler(on_error=errors.append)
    ran: list[int] = []
    now = time.monotonic()

    def boom() -> None:
        raise RuntimeError("boom")

    sched.schedule(now + 0.01, boom)
    sched.schedule(now + 0.02, lambda: ran.append(1))
    sched.schedule(now + 0.03, lambda: 1 / 0)
    sched.schedule(now + 0.04, lambda: ran.append(2))
    assert _wait(lambda: ran == [1, 2])
    assert [type(e) for e in errors] == [RuntimeError, ZeroDivisionError]
    assert sched.errors == 2 and sched.ran == 4
    sched.close()


@pytest.mark.timeout(10)
def test_a_failing_error_handler_does_not_kill_the_thread() -> None:
    def bad_handler(exc: BaseException) -> None:
        raise ValueError("handler broke too")

    sched = ReleaseScheduler(on_error=bad_handler)
    ran: list[int] = []
    sched.schedule(0.0, lambda: 1 / 0)
    sched.schedule(0.0, lambda: ran.append(1))
    assert _wait(lambda: ran == [1])
    sched.close()


@pytest.mark.timeout(10)
def test_default_error_handler_logs(caplog) -> None:
    sched = ReleaseScheduler()
    sched.schedule(0.0, lambda: 1 / 0)
    assert _wait(lambda: sched.errors == 1)
    sched.close()
    assert any("release callback failed" in r.getMessage() for r in caplog.records)


@pytest.mark.timeout(10)
def test_close_drops_pending_by_default_and_refuses_new_work() -> None:
    sched = ReleaseScheduler()
    ran: list[int] = []
    for i in range(3):
        sched.schedule(time.monotonic() + 10.0, lambda i=i: ran.append(i))
    t0 = time.monotonic()
    assert sched.close() == 3
    assert time.monotonic() - t0 < 1.0  # no waiting for the due times
    assert ran == [] and sched.closed and not sched._thread.is_alive()
    assert sched.schedule(0.0, lambda: ran.append(99)) is False
    time.sleep(0.02)
    assert ran == []
    assert sched.close() == 3  # idempotent


@pytest.mark.timeout(10)
def test_close_can_run_pending_at_once_in_time_order() -> None:
    sched = ReleaseScheduler()
    ran: list[int] = []
    now = time.monotonic()
    for i in (2, 0, 1):
        sched.schedule(now + 10.0 + i, lambda i=i: ran.append(i))
    t0 = time.monotonic()
    assert sched.close(run_pending=True) == 0
    assert time.monotonic() - t0 < 1.0
    assert ran == [0, 1, 2] and not sched._thread.is_alive()


@pytest.mark.timeout(10)
def test_close_from_a_callback_does_not_deadlock() -> None:
    holder: list[ReleaseScheduler] = []
    done = threading.Event()

    def close_me() -> None:
        holder[0].close()
        done.set()

    holder.append(ReleaseScheduler())
    holder[0].schedule(0.0, close_me)
    assert done.wait(2.0)
    assert _wait(lambda: not holder[0]._thread.is_alive())


@pytest.mark.timeout(10)
def test_concurrent_schedulers_lose_nothing() -> None:
    sched = ReleaseScheduler()
    ran: list[int] = []
    lock = threading.Lock()

    def add(i: int) -> None:
        with lock:
            ran.append(i)

    def producer(base: int) -> None:
        for i in range(200):
            sched.schedule(time.monotonic() + 0.001 * (i % 7), lambda v=base + i: add(v))

    threads = [threading.Thread(target=producer, args=(k * 1000,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert _wait(lambda: len(ran) == 800)
    assert sorted(ran) == sorted(k * 1000 + i for k in range(4) for i in range(200))
    sched.close()
