"""Decision traces: a policy put through the simulator's decision states, each call timed.

The decision-cost benchmark and the policy tests drive a policy with the fleet
simulator (:class:`~xinfer_ros.sim.engine_loop.Simulation`: Eq. 1 robots, links, CPU
preparation, the modelled GPU at the rate table's concurrent rates), on cyclic budgets
that alternate between ``budgets`` every ``phase_len`` responses with the robots'
phases staggered over the cycle (the paper's alternating 90/400 ms workload). A
:class:`~xinfer_ros.sim.decisions.DecisionRecorder` times the policy's calls at every
decision instant.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from xinfer_ros.core.constants import ALTERNATING_BUDGETS, PHASE_LENGTH, SEND_PERIOD
from xinfer_ros.core.policy import Policy
from xinfer_ros.core.rate_table import RateTable
from xinfer_ros.sim.decisions import DecisionRecorder, DecisionSample
from xinfer_ros.sim.engine_loop import SimConfig, Simulation
from xinfer_ros.sim.workloads import cyclic_workload

__all__ = ["ClosedLoopResult", "DecisionSample", "trace_decisions"]


@dataclass
class ClosedLoopResult:
    """What one traced run produced.

    Attributes:
        decisions: every timed decision instant in the recorded window, in order.
        latencies: (robot, budget, response latency) of every answered request sent
            before the run's end.
    """

    decisions: list[DecisionSample] = field(default_factory=list)
    latencies: list[tuple[str, float, float]] = field(default_factory=list)

    def attainment(self) -> float:
        """Fraction of answered requests whose latency met their budget."""
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
    record_from: float = 0.0,
    clock: Callable[[], int] = time.perf_counter_ns,
    rate_table: str | None = None,
    slots: tuple[int, int, int] | None = None,
    max_batch: int = 1,
) -> ClosedLoopResult:
    """Drive ``policy`` with a simulated closed-loop fleet for ``duration`` seconds.

    Args:
        policy: a fresh policy (on the shipped rate table, which the GPU model reads).
        robots: number of robots (>= 1).
        duration: simulated seconds of sends; requests in flight then drain.
        budgets: budgets (s) cycled per phase.
        phase_len: responses per budget phase.
        send_period: T_E.
        tick: periodic decision interval (s) while ready work waits.
        seed: seed of the start jitter and the execution-time noise.
        record_from: decisions before this time are not recorded (warm-up).
        clock: nanosecond timer used around each policy call.
        rate_table: the GPU model's table (default: the shipped one); give the
            policy's when it has another.
        slots: the GPU model's slots (default: the policy's).
        max_batch: the GPU model's batch bound; a batch-forming policy's batch
            formation is timed with the decision of its instant.

    Returns:
        The recorded decisions (up to ``duration``) and response latencies.

    Raises:
        ValueError: on a robot count below one or bad budgets.
    """
    workload = cyclic_workload(robots, budgets, seed, phase_length=phase_len,
                               duration=duration, window=(0.0, duration))
    cfg = SimConfig(policy=policy.name, robots=robots, workload="custom", seed=seed,
                    duration=duration, window=(0.0, duration), tick=tick,
                    period=send_period, keep_records=True, rate_table=rate_table,
                    slots=slots, max_batch=max_batch)
    recorder = DecisionRecorder(clock, record_from, duration)

    def given(_cfg: SimConfig, _table: RateTable) -> Policy:
        return policy

    records = Simulation(cfg, workload, given, recorder).run().records or []
    return ClosedLoopResult(recorder.samples, [
        (f"robot_{r.robot}", r.budget, r.latency) for r in records
        if r.response_time is not None])
