"""Decision traces: a policy put through realistic decision states, each call timed.

A minimal deterministic closed loop for the decision-cost benchmark and the policy
tests. Not the fleet simulator (:mod:`xinfer_ros.sim.engine_loop`): it needs no GPU
model, only decision states in chronological order. Model:

* ``robots`` robots (:class:`~xinfer_ros.core.clients.Robot`, as in the simulator) send
  requests at ``s_{j+1} = max(s_j + T_E, r_j)`` (Eq. 1), first sends staggered over one
  period; server arrival = send time.
* Budgets alternate between ``budgets`` every ``phase_len`` responses, with robot
  phases staggered over the cycle (the paper's alternating 90/400 ms workload).
* A launched unit of stage s runs ``(h_s + W_s / ρ_s(n)) · jitter``, where ``n`` is the
  running counts of other units at launch and ``jitter`` is drawn from a seeded RNG
  (±10 %). The response reaches the robot ``h_out`` after its Action completes.
* The policy is called on every arrival and completion and every ``tick`` seconds.
"""

from __future__ import annotations

import heapq
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from xinfer_ros.core.clients import Robot, RobotSpec
from xinfer_ros.core.constants import ALTERNATING_BUDGETS, PHASE_LENGTH, SEND_PERIOD
from xinfer_ros.core.policy import Policy, SchedulerOutput
from xinfer_ros.core.request import Request
from xinfer_ros.core.stages import Stage
from xinfer_ros.sim.workloads import CyclicBudgets

__all__ = ["ClosedLoopResult", "DecisionSample", "trace_decisions"]

_ARRIVAL, _COMPLETE, _TICK = 0, 1, 2
_KIND_NAMES = ("arrival", "complete", "tick")


@dataclass(frozen=True, slots=True)
class DecisionSample:
    """One timed policy call.

    Attributes:
        t: decision time (simulated seconds).
        kind: ``"arrival"``, ``"complete"`` or ``"tick"``.
        queued: ready units the decision considered (left queued + launched).
        launches: units the call launched.
        cost_ns: wall time of the policy call (event recording + decision), ns.
    """

    t: float
    kind: str
    queued: int
    launches: int
    cost_ns: int


@dataclass
class ClosedLoopResult:
    """What one closed-loop run produced.

    Attributes:
        decisions: every timed policy call, in chronological order.
        latencies: (robot, budget, response latency) of every completed request.
    """

    decisions: list[DecisionSample] = field(default_factory=list)
    latencies: list[tuple[str, float, float]] = field(default_factory=list)

    def attainment(self) -> float:
        """Fraction of completed requests whose latency met their budget."""
        if not self.latencies:
            return float("nan")
        return sum(lat <= b for _, b, lat in self.latencies) / len(self.latencies)


def trace_decisions(
    policy: Policy,
    robots: int,
    duration: float,
    *,
    budgets: Sequence[float] = ALTERNATING_BUDGETS,
    phase_len: int = PHASE_LENGTH,
    send_period: float = SEND_PERIOD,
    tick: float = 0.005,
    seed: int = 0,
    jitter: float = 0.10,
    record_from: float = 0.0,
    clock: Callable[[], int] = time.perf_counter_ns,
) -> ClosedLoopResult:
    """Drive ``policy`` with a closed-loop fleet for ``duration`` simulated seconds.

    Args:
        policy: a fresh policy.
        robots: number of robots (>= 1).
        duration: simulated seconds.
        budgets: budgets cycled per phase.
        phase_len: responses per budget phase.
        send_period: T_E.
        tick: periodic decision interval (s); 0 disables ticks.
        seed: RNG seed of the execution-time jitter.
        jitter: relative half-width of the uniform duration jitter.
        record_from: decisions before this time are not timed/recorded (warm-up).
        clock: nanosecond timer used around each policy call.

    Returns:
        The recorded decisions and response latencies.
    """
    if robots < 1:
        raise ValueError(f"robots must be >= 1, got {robots!r}")
    fleet = _Fleet(policy, robots, budgets=budgets, phase_len=phase_len,
                   send_period=send_period, tick=tick, rng=random.Random(seed), jitter=jitter,
                   clock=clock)
    events = fleet.events
    while events:
        t, _, kind, a, b = heapq.heappop(events)
        if t > duration:
            break
        out, cost = fleet.decide(t, kind, a, b)
        if t >= record_from:
            fleet.record(t, kind, out, cost)
        fleet.launch_all(out, t)
    return fleet.result


class _Fleet:
    """The robots, the event queue and the requests in flight of one closed-loop run."""

    def __init__(
        self,
        policy: Policy,
        robots: int,
        *,
        budgets: Sequence[float],
        phase_len: int,
        send_period: float,
        tick: float,
        rng: random.Random,
        jitter: float,
        clock: Callable[[], int],
    ) -> None:
        self.policy = policy
        self.pred = policy.predictor
        self.tick = tick
        self.rng = rng
        self.jitter = jitter
        self.clock = clock
        self.result = ClosedLoopResult()
        self.events: list[tuple[float, int, int, int, int]] = []  # (t, seq, kind, a, b)
        self._seq = 0
        cycle = phase_len * len(budgets)
        # Phases staggered over the cycle: robot i starts (i · cycle) // robots responses in.
        self.clients = [Robot(RobotSpec(i, i * send_period / robots, CyclicBudgets(
            tuple(budgets), phase_len, (i * cycle) // robots)), send_period)
            for i in range(robots)]
        self.by_id: dict[int, tuple[int, float]] = {}  # request id -> (robot, send time)
        self.next_id = 0
        for client in self.clients:
            self.push(client.spec.start, _ARRIVAL, client.spec.robot_id)
        if tick > 0:
            self.push(0.0, _TICK)

    def push(self, t: float, kind: int, a: int = 0, b: int = 0) -> None:
        """Queue an event; the sequence number keeps same-time events in push order."""
        heapq.heappush(self.events, (t, self._seq, kind, a, b))
        self._seq += 1

    def send(self, robot: int, t: float) -> Request:
        """The request ``robot`` sends at ``t``, with the budget of its current phase."""
        req = Request(self.next_id, f"robot_{robot}", arrival=t,
                      budget=self.clients[robot].send(t))
        self.by_id[self.next_id] = (robot, t)
        self.next_id += 1
        return req

    def decide(self, t: float, kind: int, a: int, b: int) -> tuple[SchedulerOutput, int]:
        """Hand one event to the policy; returns its output and the call's cost (ns)."""
        clock, policy = self.clock, self.policy
        if kind == _ARRIVAL:
            req = self.send(a, t)
            t0 = clock()
            out = policy.on_arrival(req, t)
            cost = clock() - t0
        elif kind == _COMPLETE:
            t0 = clock()
            out = policy.on_complete(a, Stage(b), t)
            cost = clock() - t0
        else:
            t0 = clock()
            out = policy.on_tick(t)
            cost = clock() - t0
            self.push(t + self.tick, _TICK)
        return out, cost

    def record(self, t: float, kind: int, out: SchedulerOutput, cost: int) -> None:
        """Record one timed decision."""
        ready_count = self.policy.ready_queue
        # Ready units the decision considered: those left queued plus those launched.
        queued = (len(ready_count(0)) + len(ready_count(1)) + len(ready_count(2))
                  + len(out.launches))
        self.result.decisions.append(DecisionSample(t, _KIND_NAMES[kind], queued,
                                                    len(out.launches), cost))

    def launch_all(self, out: SchedulerOutput, t: float) -> None:
        """Start the launched units and answer the finished requests."""
        pred, rng, jitter = self.pred, self.rng, self.jitter
        for ln in out.launches:
            s = ln.stage
            c = self.policy.tracker.counts
            n = [c[0], c[1], c[2]]
            n[s] -= 1  # the launched unit is already counted; rate uses the others
            dur = pred.q(s, n) * (1.0 + jitter * (2.0 * rng.random() - 1.0))
            self.push(t + dur, _COMPLETE, ln.request.request_id, int(s))
        for req in out.finished:
            robot, sent = self.by_id.pop(req.request_id)
            r_t = t + pred.h_out
            self.result.latencies.append((req.robot_id, req.budget, r_t - sent))
            self.push(self.clients[robot].receive(r_t, req.budget), _ARRIVAL, robot)
