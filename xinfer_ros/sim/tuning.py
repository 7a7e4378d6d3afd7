"""Baseline configuration by the paper's selection protocol (App. C.4).

The paper fixes the baselines' free parameters in simulation before comparing them:

* **EDF**: "the smallest per-stage concurrency limits preserving the best SLO
  attainment under alternating task phases at 15 robots";
* **Slack-Gate**: the threshold from {20, 40, 80} ms "jointly with ViT concurrency,
  using the same workload and bursty arrivals. Among candidates within 1 percentage
  point of the best attainment, selection favors lower mean latency."

This module enumerates those candidates, turns them into simulator runs and applies
the two selection rules to the results. It never runs XInfer, so the baselines are
not chosen against it. The defaults in :mod:`xinfer_ros.core.constants` are what
``xinfer-sim tune --seed 0`` selects on the shipped rate table (seeds 0-2 are also the
comparisons' rounds; see docs/BENCHMARKS.md for the selection on tuning seeds).

Per-workload tuning applies the same rules at one point of the workload being
compared (:data:`WORKLOAD_TUNING_ROBOTS`), so that a baseline is not judged on a
workload its parameters were never chosen for. Tuning rounds start from
:data:`TUNING_SEED`, never from a comparison's seeds: a selection that fits the very
rounds it is then scored on would flatter the baseline.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TypedDict

from xinfer_ros.core.constants import DEFAULT_SLOTS
from xinfer_ros.core.metrics import WindowMetrics

__all__ = [
    "EDF_TUNING_POINTS",
    "SELECTION_RULES",
    "SLACK_GATE_THRESHOLDS",
    "SLACK_GATE_TUNING_POINTS",
    "TUNED_POLICIES",
    "TUNING_SEED",
    "WORKLOAD_TUNING_ROBOTS",
    "Candidate",
    "CandidateScore",
    "CandidateScoreDict",
    "PointScore",
    "candidates",
    "edf_candidates",
    "score_candidates",
    "select",
    "select_edf",
    "select_slack_gate",
    "slack_gate_candidates",
    "tuning_points",
    "workload_point",
]

#: (workload, robots) the EDF limits are selected on (App. C.4).
EDF_TUNING_POINTS: tuple[tuple[str, int], ...] = (("phases", 15),)
#: (workload, robots) Slack-Gate is selected on: the same phases point and the bursty
#: workload (12 base robots plus its two groups of six).
SLACK_GATE_TUNING_POINTS: tuple[tuple[str, int], ...] = (("phases", 15), ("bursty", 12))
#: Slack-Gate threshold candidates (s): 20, 40 and 80 ms.
SLACK_GATE_THRESHOLDS: tuple[float, ...] = (0.020, 0.040, 0.080)
#: Each tuned policy's selection rule, in words (printed and written with a tuning).
SELECTION_RULES: dict[str, str] = {
    "edf": "smallest limits with the best attainment",
    "slack_gate": "lowest mean latency within 1 point of the best attainment",
}
#: The policies the protocol tunes; every other policy has no free parameter here.
TUNED_POLICIES: tuple[str, ...] = ("edf", "slack_gate")
#: Base seed of tuning rounds (``round_seeds`` makes 7000, 7001, ...). Comparisons
#: default to base seed 0 (seeds 0, 1, ...), so the two never share a round.
TUNING_SEED: int = 7
#: Robot count of the per-workload tuning point: the count each workload's comparison
#: in docs/BENCHMARKS.md is reported at, where the paper's phases point (15) is one
#: robot above FIFO's capacity and concurrency limits start to matter. bursty counts
#: its base robots (two groups of six join during the bursts).
WORKLOAD_TUNING_ROBOTS: dict[str, int] = {
    "phases": 15, "parcel": 15, "multi_budget": 15, "uniform": 15, "bursty": 12}


@dataclass(frozen=True, slots=True)
class Candidate:
    """One baseline configuration: the policy name and its constructor arguments."""

    policy: str
    params: tuple[tuple[str, float | tuple[int, ...]], ...]

    @property
    def kwargs(self) -> dict[str, float | list[int]]:
        """Constructor keyword arguments (lists, JSON-friendly)."""
        return {k: list(v) if isinstance(v, tuple) else v for k, v in self.params}

    def label(self) -> str:
        """Short human-readable form, e.g. ``threshold=20ms limits=3,4,6``."""
        parts = []
        for k, v in self.params:
            if k == "threshold" and not isinstance(v, tuple):
                parts.append(f"threshold={v * 1e3:g}ms")
            elif isinstance(v, tuple):
                parts.append(f"{k}={','.join(str(x) for x in v)}")
            else:
                parts.append(f"{k}={v}")
        return " ".join(parts)


class PointScore(TypedDict):
    """One tuning point's means in :meth:`CandidateScore.to_dict`."""

    attainment: float
    latency_mean_ms: float


class CandidateScoreDict(TypedDict):
    """:meth:`CandidateScore.to_dict`."""

    policy: str
    params: dict[str, float | list[int]]
    attainment: float
    latency_mean_ms: float
    per_point: dict[str, PointScore]
    rounds: dict[str, list[float]]


@dataclass(frozen=True, slots=True)
class CandidateScore:
    """A candidate's results over every tuning point and round.

    Attributes:
        candidate: The configuration.
        attainment: Mean SLO attainment (fraction) over points, each point the mean
            of its rounds.
        latency_ms: Mean response latency (ms), averaged the same way.
        per_point: ``"workload/robots"`` -> (mean attainment, mean latency in ms).
        rounds: ``"workload/robots"`` -> each round's attainment.
    """

    candidate: Candidate
    attainment: float
    latency_ms: float
    per_point: dict[str, tuple[float, float]]
    rounds: dict[str, list[float]]

    def to_dict(self) -> CandidateScoreDict:
        """JSON-ready form."""
        return {
            "policy": self.candidate.policy,
            "params": self.candidate.kwargs,
            "attainment": self.attainment,
            "latency_mean_ms": self.latency_ms,
            "per_point": {k: {"attainment": a, "latency_mean_ms": lat}
                          for k, (a, lat) in self.per_point.items()},
            "rounds": self.rounds,
        }


def edf_candidates(slots: Sequence[int] = DEFAULT_SLOTS) -> list[Candidate]:
    """Every per-stage limit vector from (1, 1, 1) up to the physical ``slots``."""
    ranges = [range(1, int(n) + 1) for n in slots]
    return [Candidate("edf", (("limits", tuple(v)),)) for v in itertools.product(*ranges)]


def slack_gate_candidates(
    slots: Sequence[int] = DEFAULT_SLOTS,
    thresholds: Sequence[float] = SLACK_GATE_THRESHOLDS,
) -> list[Candidate]:
    """Each threshold with each ViT concurrency limit (Prefill, Action at their slots)."""
    return [
        Candidate("slack_gate", (("threshold", float(thr)),
                                 ("limits", (v, int(slots[1]), int(slots[2])))))
        for thr in thresholds for v in range(1, int(slots[0]) + 1)
    ]


def candidates(
    policy: str,
    slots: Sequence[int] = DEFAULT_SLOTS,
    thresholds: Sequence[float] = SLACK_GATE_THRESHOLDS,
) -> list[Candidate]:
    """The protocol's candidate grid for ``policy`` (``thresholds`` only for Slack-Gate).

    Raises:
        ValueError: for a policy the protocol does not tune.
    """
    _check_tuned(policy)
    return edf_candidates(slots) if policy == "edf" else slack_gate_candidates(slots, thresholds)


def tuning_points(
    policy: str, workload: str | None = None, robots: int | None = None,
) -> tuple[tuple[str, int], ...]:
    """The (workload, robots) points ``policy`` is selected on.

    Args:
        policy: ``edf`` or ``slack_gate``.
        workload: ``None`` for the paper's points (App. C.4); a workload name for
            per-workload tuning at that workload alone.
        robots: The per-workload point's robot count; ``None`` for
            :data:`WORKLOAD_TUNING_ROBOTS`. Ignored without ``workload``.

    Raises:
        ValueError: for a policy the protocol does not tune, a workload without a
            default count and no ``robots``, or ``robots`` < 1.
    """
    _check_tuned(policy)
    if workload is None:
        return EDF_TUNING_POINTS if policy == "edf" else SLACK_GATE_TUNING_POINTS
    return (workload_point(workload, robots),)


def workload_point(workload: str, robots: int | None = None) -> tuple[str, int]:
    """The per-workload tuning point of ``workload`` (the same for every tuned policy).

    Args:
        workload: The workload name.
        robots: The point's robot count; ``None`` for :data:`WORKLOAD_TUNING_ROBOTS`.

    Raises:
        ValueError: for a workload without a default count and no ``robots``, or
            ``robots`` < 1.
    """
    if robots is None:
        if workload not in WORKLOAD_TUNING_ROBOTS:
            raise ValueError(f"no default tuning count for workload {workload!r}; "
                             "give the robot count")
        robots = WORKLOAD_TUNING_ROBOTS[workload]
    if robots < 1:
        raise ValueError(f"a tuning point needs at least one robot, got {robots}")
    return (workload, robots)


def _check_tuned(policy: str) -> None:
    if policy not in TUNED_POLICIES:
        raise ValueError(f"the App. C.4 protocol tunes edf and slack_gate, not {policy!r}")


def score_candidates(
    results: Mapping[tuple[Candidate, str, int], Sequence[WindowMetrics]],
) -> list[CandidateScore]:
    """Aggregate per-(candidate, workload, robots) round metrics into scores.

    Each point weighs the same, whatever its request count, as the paper's
    equally weighted round means do.
    """
    grouped: dict[Candidate, dict[str, Sequence[WindowMetrics]]] = {}
    for (cand, workload, robots), metrics in results.items():
        if not metrics:
            raise ValueError(f"no rounds for {cand.label()} at {workload}/{robots}")
        grouped.setdefault(cand, {})[f"{workload}/{robots}"] = metrics
    scores = []
    for cand, points in grouped.items():
        per_point = {}
        rounds = {}
        for key, ms in points.items():
            per_point[key] = (sum(m.attainment for m in ms) / len(ms),
                              sum(m.latency_mean_ms for m in ms) / len(ms))
            rounds[key] = [m.attainment for m in ms]
        att = sum(a for a, _ in per_point.values()) / len(per_point)
        lat = sum(lat for _, lat in per_point.values()) / len(per_point)
        scores.append(CandidateScore(cand, att, lat, per_point, rounds))
    return scores


def _near_best(scores: Sequence[CandidateScore], window: float,
               what: str) -> list[CandidateScore]:
    """Scores whose attainment is within ``window`` of the best one."""
    if not scores:
        raise ValueError(f"no {what} candidates to select from")
    best = max(s.attainment for s in scores)
    return [s for s in scores if s.attainment >= best - window - 1e-12]


def _size(c: Candidate) -> tuple[int, tuple[int, ...]]:
    limits = dict(c.params)["limits"]
    if not isinstance(limits, tuple):  # EDF candidates carry a limit per stage
        raise TypeError(f"{c.label()}: limits must be one count per stage")
    return (sum(limits), limits)


def select_edf(scores: Sequence[CandidateScore], tolerance: float = 0.0) -> CandidateScore:
    """The smallest limits whose attainment is within ``tolerance`` of the best.

    "Smallest" is the least total concurrency, ties broken lexicographically (V, P, A).
    With the default tolerance of 0 only candidates matching the best exactly qualify:
    limits that never bind produce identical runs, and the smallest of those is kept.

    Raises:
        ValueError: on an empty list.
    """
    return min(_near_best(scores, tolerance, "EDF"), key=lambda s: _size(s.candidate))


def select(policy: str, scores: Sequence[CandidateScore]) -> CandidateScore:
    """Apply ``policy``'s selection rule with the protocol's tolerance.

    Raises:
        ValueError: for a policy the protocol does not tune, or no scores.
    """
    _check_tuned(policy)
    return select_edf(scores) if policy == "edf" else select_slack_gate(scores)


def select_slack_gate(scores: Sequence[CandidateScore], window: float = 0.01) -> CandidateScore:
    """Lowest mean latency among candidates within ``window`` (1 point) of the best.

    Raises:
        ValueError: on an empty list.
    """
    return min(_near_best(scores, window, "Slack-Gate"),
               key=lambda s: (s.latency_ms, -s.attainment, s.candidate.label()))
