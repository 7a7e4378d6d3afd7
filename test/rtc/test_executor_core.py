"""The executor's decisions without ROS: a fake clock drives ticks, sends and chunks."""

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from xinfer_ros.rtc.command_gate import LimitAction
from xinfer_ros.rtc.executor_core import (
    Chunk,
    ChunkStatus,
    DropReason,
    ExecutorConfig,
    ExecutorCore,
    Level,
    Lifecycle,
    Request,
)
from xinfer_ros.rtc.limits import LIMIT_RTOL, CommandLimits

H, D, DT = 16, 2, 0.03
STAMP0 = 1000.0  # robot clock at monotonic 0


def config(**kw: object) -> ExecutorConfig:
    base = {"robot_id": "r1", "action_dim": D, "spacing": DT, "commit": 4,
            "min_period": 0.18, "request_timeout": 0.5, "hold_timeout": 0.2,
            "engage_ramp": DT}
    return ExecutorConfig(**{**base, **kw})  # type: ignore[arg-type]


class Loop:
    """The core on a fake clock; ``answer`` builds each chunk from its request."""

    def __init__(self, follow: bool = False, **kw: object) -> None:
        self.follow = follow  # the robot reaches each command (joint_states report it)
        self.logs: list[tuple[Level, str]] = []
        self.core = ExecutorCore(config(**kw), t0=0.0,
                                 log=lambda lvl, text: self.logs.append((lvl, text)))
        self.now = 0.0
        self.requests: list[Request] = []
        self.commands: list[np.ndarray] = []
        self.pending: list[tuple[float, Request]] = []

    def step(self, server_present: bool = True) -> Request | None:
        command = self.core.tick(self.now)
        if command is not None:
            self.commands.append(command)
            if self.follow:
                self.core.measure(command)
        req = self.core.poll_send(self.now, STAMP0 + self.now, lambda: server_present)
        if req is not None:
            self.requests.append(req)
        return req

    def run(self, seconds: float, answer: float | None = 1.0, server_present: bool = True,
            latency_ticks: int = 2) -> None:
        """Run ticks; answer each request ``latency_ticks`` later with level ``answer``.

        ``answer=None``: the server is silent (requests pending now are never answered).
        """
        if answer is None:
            self.pending.clear()
        pending = self.pending
        end = self.now + seconds
        while self.now < end:
            req = self.step(server_present)
            if req is not None and answer is not None:
                pending.append((self.now + latency_ticks * DT, req))
            for due, r in list(pending):
                if due <= self.now + 1e-9:
                    pending.remove((due, r))
                    self.core.on_chunk(self.chunk(r, answer), self.now)
            self.now = round(self.now + DT, 9)

    def chunk(self, req: Request, level: float, **kw: object) -> Chunk:
        actions = np.full((H, D), level)
        fields = {"robot_id": "r1", "seq": req.seq, "server": req.server,
                  "status": ChunkStatus.OK, "horizon": H, "action_dim": D,
                  "actions": actions.ravel(), "stamps": (req.stamp - 0.05, req.stamp)}
        return Chunk(**{**fields, **kw})  # type: ignore[arg-type]


# -- lifecycle --------------------------------------------------------------------------
def test_inactive_executor_neither_requests_nor_commands() -> None:
    loop = Loop()
    assert loop.core.state is Lifecycle.INACTIVE
    loop.run(0.5)
    assert loop.requests == [] and loop.commands == []
    assert loop.core.status()[0] is Level.WARN and "inactive" in loop.core.status()[1]


def test_activate_commands_and_deactivate_stops_commands_at_once() -> None:
    loop = Loop()
    loop.core.activate(loop.now)
    loop.run(0.5)
    assert loop.requests and loop.commands and loop.core.commanding
    loop.core.deactivate()
    assert loop.core.state is Lifecycle.INACTIVE and not loop.core.commanding
    count, sent = len(loop.commands), len(loop.requests)
    loop.run(0.5)
    assert len(loop.commands) == count and len(loop.requests) == sent
    # Reactivation starts again from a fresh request without an RTC prefix.
    loop.core.activate(loop.now)
    loop.run(0.3)
    assert len(loop.requests) > sent and loop.requests[sent].prev_chunk is None
    assert len(loop.commands) > count


def test_a_chunk_arriving_while_inactive_is_dropped() -> None:
    loop = Loop()
    loop.core.activate(0.0)
    req = loop.step()
    assert req is not None
    loop.core.deactivate()
    assert loop.core.on_chunk(loop.chunk(req, 1.0), 0.03) is DropReason.INACTIVE


# -- send timing ------------------------------------------------------------------------
def test_sends_follow_eq1_and_carry_the_prefix() -> None:
    loop = Loop()
    loop.core.activate(0.0)
    loop.run(1.5)
    sends = np.array([r.stamp - STAMP0 for r in loop.requests])
    gaps = np.diff(sends)
    # Answers come 2 ticks after the send, sooner than T_E: sends are T_E apart (on the
    # tick grid).
    assert np.all(gaps >= 0.18 - 1e-9) and np.all(gaps <= 0.18 + DT + 1e-9)
    assert loop.requests[0].prev_chunk is None
    assert loop.requests[1].prev_chunk is not None
    assert loop.requests[1].prev_chunk.shape == (H, D)
    assert [r.seq for r in loop.requests] == list(range(1, len(loop.requests) + 1))


def test_unanswered_request_times_out_and_is_resent() -> None:
    loop = Loop()
    loop.core.activate(0.0)
    loop.run(1.2, answer=None)
    assert loop.core.request_timeouts == 2 and len(loop.requests) == 3
    assert loop.commands == []  # silent start: nothing before a chunk


def test_a_server_that_appears_gets_the_request_at_once() -> None:
    loop = Loop()
    loop.core.activate(0.0)
    loop.run(0.1, answer=None, server_present=False)
    assert len(loop.requests) == 1
    loop.run(0.03, answer=None, server_present=True)
    assert len(loop.requests) == 2 and loop.core.request_timeouts == 0


def test_the_graph_is_asked_about_the_server_only_when_a_request_is_due() -> None:
    loop = Loop()
    loop.core.activate(0.0)
    asked: list[float] = []

    def present() -> bool:
        asked.append(loop.now)
        return True

    for _ in range(100):  # 100 ticks, never answered: one request, then its resends
        loop.core.tick(loop.now)
        req = loop.core.poll_send(loop.now, STAMP0 + loop.now, present)
        if req is not None:
            loop.requests.append(req)
        loop.now += DT
    # Once per send (heard at once), not once per tick.
    assert 0 < len(asked) == len(loop.requests) < 100


def test_managed_sends_only_when_assigned_and_a_switch_resends() -> None:
    loop = Loop(managed=True)
    loop.core.activate(0.0)
    loop.run(0.3)
    assert loop.requests == [] and "fleet assignment" in loop.core.status()[1]
    assert loop.core.assign("a", "", loop.now)
    loop.run(0.1, answer=None)
    assert [r.server for r in loop.requests] == ["a"]
    assert loop.core.assign("b", "", loop.now)
    loop.step()
    assert loop.requests[-1].server == "b" and loop.core.server_switches == 1
    # server a answers late: dropped.
    late = loop.chunk(loop.requests[0], 5.0)
    assert loop.core.on_chunk(late, loop.now) is DropReason.FOREIGN_SERVER


# -- hold and halt ----------------------------------------------------------------------
def test_hold_then_halt_then_resume() -> None:
    loop = Loop()
    loop.core.activate(0.0)
    loop.run(0.5)
    loop.run(H * DT + 0.4, answer=None)
    assert not loop.core.commanding and loop.core.halts == 1
    assert loop.core.status() == (Level.ERROR, "no chunk for over 0.2 s: commands stopped")
    count = len(loop.commands)
    loop.run(0.3, answer=None)
    assert len(loop.commands) == count
    loop.run(0.5)
    assert loop.core.commanding and len(loop.commands) > count


def test_hold_state_start_commands_the_measured_joints_only_when_active() -> None:
    loop = Loop(startup="hold_state")
    loop.core.measure(np.array([0.3, -0.3]))
    loop.run(0.2, answer=None)
    assert loop.commands == []
    loop.core.activate(loop.now)
    loop.run(0.2, answer=None)
    assert loop.commands and all(c.tolist() == [0.3, -0.3] for c in loop.commands)


# -- engage -----------------------------------------------------------------------------
def test_engage_ramps_from_the_measured_state_without_a_jump() -> None:
    vmax = 2.0
    limits = CommandLimits.build(D, max_velocity=vmax)
    loop = Loop(engage_ramp=0.3, limits=limits)
    loop.core.measure(np.array([0.0, 0.0]))
    loop.core.activate(0.0)
    loop.run(1.0, answer=1.0)
    commands = np.vstack([[0.0, 0.0], *loop.commands])
    assert np.abs(np.diff(commands, axis=0)).max() <= vmax * DT + 1e-12
    assert commands[1, 0] > 0.0 and commands[1, 0] < 0.1  # a blend, not a step to 1
    assert commands[-1] == pytest.approx([1.0, 1.0])


# -- limits -----------------------------------------------------------------------------
def test_clamp_mode_clamps_positions_and_counts() -> None:
    limits = CommandLimits.build(D, max_velocity=1.0)
    loop = Loop(limits=limits, limit_action=LimitAction.CLAMP)
    loop.core.activate(0.0)
    loop.run(0.5, answer=0.0)
    loop.run(1.5, answer=1.0)  # the level jumps from 0 to 1: velocity clamped
    assert loop.core.gate.clamps > 0 and loop.core.commanding
    assert loop.commands[-1] == pytest.approx([1.0, 1.0])
    commands = np.vstack(loop.commands)
    assert np.abs(np.diff(commands, axis=0)).max() <= 1.0 * DT + 1e-12


def test_stop_mode_stops_commanding_until_activated_again() -> None:
    limits = CommandLimits.build(D, max_velocity=1.0)
    loop = Loop(limits=limits, limit_action=LimitAction.STOP)
    loop.core.activate(0.0)
    loop.run(0.6, answer=0.0)
    assert loop.core.commanding
    loop.run(0.5, answer=1.0)  # a step of 1 in one tick breaks the velocity limit
    assert not loop.core.commanding and loop.core.limit_stopped
    level, text = loop.core.status()
    assert level is Level.ERROR and "velocity limit" in text
    count = len(loop.commands)
    loop.run(0.5, answer=1.0)
    assert len(loop.commands) == count  # chunks keep coming; nothing is commanded
    loop.core.deactivate()
    loop.core.activate(loop.now)
    loop.run(1.5, answer=1.0)
    assert loop.core.commanding and not loop.core.limit_stopped
    assert loop.commands[-1] == pytest.approx([1.0, 1.0])


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(-6.0, 6.0), min_size=1, max_size=8))
@example([0.0, 1.0, -8.715518983929807e-11])  # a velocity-limited step lands 8.7e-11 over
def test_no_command_ever_outside_limits(levels: list[float]) -> None:
    limits = CommandLimits.build(D, min_position=-5.0, max_position=5.0, max_velocity=3.0)
    loop = Loop(limits=limits, engage_ramp=0.1, follow=True)
    loop.core.measure(np.zeros(D))
    loop.core.activate(0.0)
    for level in levels:
        loop.run(0.2, answer=level)
    # Chunks beyond the bounds are dropped; whatever is sent stays within the limits.
    commands = np.vstack([np.zeros(D), *loop.commands])
    assert np.all(np.abs(commands) <= 5.0)
    # Within the checks' rounding slack (LIMIT_RTOL), not exactly 3·Δ.
    velocity_bound = 3.0 * (1.0 + LIMIT_RTOL) + LIMIT_RTOL
    assert np.abs(np.diff(commands, axis=0)).max(initial=0.0) <= velocity_bound * DT


# -- chunk sanity -----------------------------------------------------------------------
def _in_flight() -> tuple[Loop, Request]:
    loop = Loop(limits=CommandLimits.build(D, min_position=-2.0, max_position=2.0))
    loop.core.activate(0.0)
    req = loop.step()
    assert req is not None
    loop.now = 0.06
    return loop, req


@pytest.mark.parametrize(("change", "reason"), [
    ({"robot_id": "r2"}, DropReason.OTHER_ROBOT),
    ({"seq": 99}, DropReason.NOT_IN_FLIGHT),
    ({"horizon": 3}, DropReason.MALFORMED),
    ({"action_dim": 3}, DropReason.MALFORMED),
    ({"actions": np.full(H * D, np.nan)}, DropReason.NON_FINITE),
    ({"actions": np.full(H * D, 1e6)}, DropReason.OUT_OF_LIMITS),
    ({"stamps": (0.0,)}, DropReason.STALE_OBSERVATION),  # stamped 1970
    ({"stamps": ()}, DropReason.STALE_OBSERVATION),
    ({"stamps": (STAMP0 + 3600.0,)}, DropReason.FUTURE_OBSERVATION),  # an hour ahead
    ({"stamps": (STAMP0 - 0.6, STAMP0)}, DropReason.STALE_OBSERVATION),
])
def test_each_sanity_rule_drops_and_counts(change: dict[str, object],
                                           reason: DropReason) -> None:
    loop, req = _in_flight()
    bad = replace(loop.chunk(req, 1.0), **change)  # type: ignore[arg-type]
    assert loop.core.on_chunk(bad, loop.now) is reason
    assert loop.core.drops[reason] == 1 and loop.core.queue.counters.chunks_applied == 0
    # A dropped forgery does not end the request in flight: the real answer is applied.
    if reason is not DropReason.OTHER_ROBOT:
        assert loop.core.in_flight_seq == req.seq
    assert loop.core.on_chunk(loop.chunk(req, 1.0), loop.now) is None
    assert loop.core.queue.counters.chunks_applied == 1


def test_chunk_from_another_server_than_the_request_went_to_is_dropped() -> None:
    loop = Loop(managed=True)
    loop.core.activate(0.0)
    loop.core.assign("a", "", 0.0)
    req = loop.step()
    assert req is not None and req.server == "a"
    forged = replace(loop.chunk(req, 1.0), server="b")
    assert loop.core.on_chunk(forged, 0.03) is DropReason.FOREIGN_SERVER


def test_non_ok_answer_ends_the_request_and_schedules_the_next_by_eq1() -> None:
    loop, req = _in_flight()
    shed = replace(loop.chunk(req, 1.0), status=ChunkStatus.SHED, reason="late")
    assert loop.core.on_chunk(shed, loop.now) is DropReason.NON_OK
    assert loop.core.in_flight_seq is None
    assert loop.core.next_send_at == pytest.approx(0.18)


def test_observation_stamps_within_age_and_skew_are_accepted() -> None:
    loop, req = _in_flight()
    ok = replace(loop.chunk(req, 1.0), stamps=(req.stamp - 0.49, req.stamp + 0.09))
    assert loop.core.on_chunk(ok, loop.now) is None


# -- watchdog ---------------------------------------------------------------------------
def test_wall_clock_watchdog_stops_commands_when_the_tick_stalls() -> None:
    loop = Loop()
    loop.core.activate(0.0)
    loop.run(0.5)
    assert loop.core.commanding
    last = loop.now - DT
    assert not loop.core.check_watchdog(last + 2 * DT - 1e-6)
    # The node clock stops: no tick for more than 2 x Δ of wall time.
    assert loop.core.check_watchdog(last + 2 * DT + 0.01)
    assert not loop.core.commanding and loop.core.watchdog_trips == 1
    level, text = loop.core.status()
    assert level is Level.ERROR and "control tick stalled" in text
    assert loop.core.check_watchdog(last + 5.0) and loop.core.watchdog_trips == 1
    # The clock runs again: commands resume with the next chunk.
    loop.now = last + 5.0
    loop.run(0.5)
    assert loop.core.commanding and loop.core.status()[0] is Level.OK


def test_watchdog_is_quiet_while_inactive() -> None:
    loop = Loop()
    assert not loop.core.check_watchdog(100.0)


def test_strangers_on_the_robots_topics_are_named() -> None:
    from xinfer_ros.rtc.executor_core import strangers

    assert strangers("/r1/rtc_executor", ["/r1/rtc_executor"], ["/inference_server"]) == []
    found = strangers("/r1/rtc_executor", ["/r1/rtc_executor", "/intruder"],
                      ["/inference_server", "/server_b"])
    assert found[0] == "unexpected publisher(s) on policy_request: /intruder"
    assert "2 publishers on action_chunk" in found[1] and "/server_b" in found[1]
    assert strangers("/r1/rtc_executor", [], ["/a", "/b"], servers=2) == []
