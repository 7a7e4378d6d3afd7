"""Scheduler core: request contract, predictor, policies, forecaster (no ROS, no torch).

The simulator (``xinfer_ros.sim``), the GPU engine (``xinfer_ros.engine``) and the ROS
server (``xinfer_ros.nodes``) all drive the same policy objects through one event API.
Times are seconds on the driver's clock and are always passed in; a policy never reads
a clock. Every ``on_*`` call returns a :class:`SchedulerOutput`; the driver starts each
``Launch`` in it right away (the policy already counts it as running) and reports the
unit's completion later::

    from xinfer_ros.core import Request, Stage, make_policy

    policy = make_policy("xinfer", slots=(4, 4, 6))      # or fifo / edf / slack_gate
    out = policy.on_arrival(Request(1, "robot_0", arrival=0.0, budget=0.090), t=0.0)
    for launch in out.launches:                          # -> ViT of request 1
        engine.start(launch.request, launch.stage)       # driver-specific
    # ... when the engine reports that unit done at t = 0.0065:
    out = policy.on_complete(1, Stage.VIT, t=0.0065)     # -> Prefill of request 1, ...
    out = policy.on_tick(t=0.010)                        # periodic re-decision
    done = out.finished                                  # requests whose Action completed

Modules: ``stages`` (Stage, StageState), ``request`` (Request), ``constants`` (paper
defaults, seconds), ``rate_table`` (ρ table + JSON format), ``predictor`` (Eq. 8–10),
``forecast`` (arrival forecasts), ``policy`` (interface + decision dataclasses),
``baselines`` (fifo, edf, slack_gate), ``xinfer_policy`` (Alg. 1–2 + ablations),
``registry`` (make_policy), ``metrics`` (attainment, goodput, percentiles),
``phase_spread`` (release times that keep the robots' send phases apart), ``timing``
(the deadline, Eq. 1 and the ms boundary), ``ring`` (fixed-size stores of float rows for
statistics a server keeps for days), ``errors``. The closed-loop drivers live
above core: ``xinfer_ros.sim`` (the simulator, whose ``decision_trace`` times policy
decisions) and ``xinfer_ros.engine.closed_loop``.
"""

from xinfer_ros.core.baselines import EDFPolicy, FIFOPolicy, SlackGatePolicy
from xinfer_ros.core.errors import (
    InvalidRequestError,
    RateTableError,
    SchedulerStateError,
    UnknownPolicyError,
    XInferError,
)
from xinfer_ros.core.forecast import ArrivalForecaster, Forecast
from xinfer_ros.core.phase_spread import PhaseSpreader
from xinfer_ros.core.policy import Launch, Policy, SchedulerOutput
from xinfer_ros.core.predictor import Predictor, ProgressTracker, RunningUnit
from xinfer_ros.core.rate_table import (
    RateTable,
    default_rate_table,
    interference_model_table,
    load_rate_table,
    write_rate_table,
)
from xinfer_ros.core.registry import make_policy, policy_names
from xinfer_ros.core.request import Request
from xinfer_ros.core.stages import STAGES, Stage, StageState
from xinfer_ros.core.xinfer_policy import AdmissionRecord, XInferPolicy

__all__ = [
    "STAGES",
    "AdmissionRecord",
    "ArrivalForecaster",
    "EDFPolicy",
    "FIFOPolicy",
    "Forecast",
    "InvalidRequestError",
    "Launch",
    "PhaseSpreader",
    "Policy",
    "Predictor",
    "ProgressTracker",
    "RateTable",
    "RateTableError",
    "Request",
    "RunningUnit",
    "SchedulerOutput",
    "SchedulerStateError",
    "SlackGatePolicy",
    "Stage",
    "StageState",
    "UnknownPolicyError",
    "XInferError",
    "XInferPolicy",
    "default_rate_table",
    "interference_model_table",
    "load_rate_table",
    "make_policy",
    "policy_names",
    "write_rate_table",
]
