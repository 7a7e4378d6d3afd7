"""A minimal deterministic closed-loop driver (for the decision-cost benchmark and tests).

Not the fleet simulator (that lives in ``xinfer_ros.sim``): it only needs to put a
policy through realistic decision states in chronological order. Model:

* ``robots`` robots send requests at ``s_{j+1} = max(s_j + T_E, r_j)`` (Eq. 1), first
  sends staggered over one period; server arrival = send time.
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

from xinfer_ros.core.constants import ALTERNATING_BUDGETS, PHASE_LENGTH, SEND_PERIOD
from xinfer_ros.core.policy import Policy, SchedulerOutput
from xinfer_ros.core.request import Request
from xinfer_ros.core.stages import Stage
from xinfer_ros.core.timing import next_send

__all__ = ["ClosedLoopResult", "DecisionSample", "run_closed_loop"]

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


def run_closed_loop(
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
    rng = random.Random(seed)
    pred = policy.predictor
    res = ClosedLoopResult()
    events: list[tuple[float, int, int, int, int]] = []  # (t, seq, kind, a, b)
    seq = 0
    cycle = phase_len * len(budgets)
    responses = [(i * cycle) // robots for i in range(robots)]  # staggered phases
    last_send = [0.0] * robots
    by_id: dict[int, tuple[int, float]] = {}  # request id -> (robot, send time)
    next_id = 0
    ready_count = policy.ready_queue

    def push(t: float, kind: int, a: int = 0, b: int = 0) -> None:
        nonlocal seq
        heapq.heappush(events, (t, seq, kind, a, b))
        seq += 1

    for i in range(robots):
        push(i * send_period / robots, _ARRIVAL, i)
    if tick > 0:
        push(0.0, _TICK)

    def launch_all(out: SchedulerOutput, t: float) -> None:
        for ln in out.launches:
            s = ln.stage
            c = policy.tracker.counts
            n = [c[0], c[1], c[2]]
            n[s] -= 1  # the launched unit is already counted; rate uses the others
            dur = pred.q(s, n) * (1.0 + jitter * (2.0 * rng.random() - 1.0))
            push(t + dur, _COMPLETE, ln.request.request_id, int(s))
        for req in out.finished:
            robot, sent = by_id.pop(req.request_id)
            r_t = t + pred.h_out
            res.latencies.append((req.robot_id, req.budget, r_t - sent))
            responses[robot] += 1
            nxt = next_send(last_send[robot], r_t, send_period)
            push(nxt, _ARRIVAL, robot)

    while events:
        t, _, kind, a, b = heapq.heappop(events)
        if t > duration:
            break
        if kind == _ARRIVAL:
            budget = budgets[(responses[a] // phase_len) % len(budgets)]
            req = Request(next_id, f"robot_{a}", arrival=t, budget=budget)
            by_id[next_id] = (a, t)
            last_send[a] = t
            next_id += 1
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
            push(t + tick, _TICK)
        if t >= record_from:
            # Ready units the decision considered: those left queued plus those launched.
            queued = (len(ready_count(0)) + len(ready_count(1)) + len(ready_count(2))
                      + len(out.launches))
            res.decisions.append(DecisionSample(t, _KIND_NAMES[kind], queued,
                                                len(out.launches), cost))
        launch_all(out, t)
    return res
