"""App. C.4 baseline selection: candidate grids and the two selection rules."""

from __future__ import annotations

import pytest

from xinfer_ros.core.metrics import WindowMetrics
from xinfer_ros.sim.runner import round_seeds
from xinfer_ros.sim.tuning import (
    TUNING_SEED,
    WORKLOAD_TUNING_ROBOTS,
    Candidate,
    CandidateScore,
    candidates,
    edf_candidates,
    score_candidates,
    select,
    select_edf,
    select_slack_gate,
    slack_gate_candidates,
    tuning_points,
    workload_point,
)
from xinfer_ros.sim.workloads import WORKLOADS


def _metrics(attainment: float, latency_ms: float) -> WindowMetrics:
    return WindowMetrics(
        requests=100, responses=100, errors=0, on_time=int(attainment * 100),
        attainment=attainment, goodput_rps=1.0, throughput_rps=1.0, latency_p50_ms=1.0,
        latency_p95_ms=1.0, latency_p99_ms=1.0, latency_mean_ms=latency_ms,
        mean_wide_latency_ms=1.0, wide_budget_ms=400.0, per_budget={},
        per_budget_requests={}, unanswered=0)


def _score(cand: Candidate, att: float, lat: float) -> CandidateScore:
    return CandidateScore(cand, att, lat, {"phases/15": (att, lat)}, {"phases/15": [att]})


def _edf(v: int, p: int, a: int) -> Candidate:
    return Candidate("edf", (("limits", (v, p, a)),))


def test_grids_cover_every_limit_up_to_the_slots() -> None:
    edf = edf_candidates((2, 1, 3))
    assert len(edf) == 6 and {c.kwargs["limits"][1] for c in edf} == {1}
    assert max(tuple(c.kwargs["limits"]) for c in edf) == (2, 1, 3)
    sg = slack_gate_candidates((4, 4, 6))
    assert len(sg) == 12
    assert {c.kwargs["threshold"] for c in sg} == {0.02, 0.04, 0.08}
    assert all(c.kwargs["limits"][1:] == [4, 6] for c in sg)
    assert sg[0].label() == "threshold=20ms limits=1,4,6"


def test_tuning_points_follow_the_protocol() -> None:
    assert tuning_points("edf") == (("phases", 15),)
    assert tuning_points("slack_gate") == (("phases", 15), ("bursty", 12))
    with pytest.raises(ValueError, match="fifo"):
        tuning_points("fifo")


def test_per_workload_points_use_that_workload_alone() -> None:
    assert tuning_points("slack_gate", "parcel") == (("parcel", 15),)
    assert tuning_points("edf", "bursty") == (("bursty", 12),)
    assert tuning_points("edf", "multi_budget", 18) == (("multi_budget", 18),)
    # The per-workload point is the same for every tuned policy.
    assert workload_point("parcel") == tuning_points("edf", "parcel")[0] == ("parcel", 15)
    # Every named workload but the user's own file has a default count.
    assert set(WORKLOADS) - set(WORKLOAD_TUNING_ROBOTS) == {"custom"}
    with pytest.raises(ValueError, match="custom"):
        tuning_points("edf", "custom")
    assert tuning_points("edf", "custom", 9) == (("custom", 9),)
    with pytest.raises(ValueError, match="at least one robot"):
        tuning_points("edf", "parcel", 0)
    with pytest.raises(ValueError, match="xinfer"):
        tuning_points("xinfer", "parcel")


def test_tuning_rounds_never_share_a_seed_with_a_default_comparison() -> None:
    for rounds in (1, 3, 10, 100):
        assert not set(round_seeds(TUNING_SEED, rounds)) & set(round_seeds(0, rounds))


def test_candidates_and_select_dispatch_on_the_policy() -> None:
    assert candidates("edf", (2, 1, 3)) == edf_candidates((2, 1, 3))
    assert candidates("slack_gate", (2, 4, 6), (0.04,)) == slack_gate_candidates((2, 4, 6),
                                                                              (0.04,))
    with pytest.raises(ValueError, match="fifo"):
        candidates("fifo")
    scores = [_score(_edf(3, 1, 2), 0.966, 171.0), _score(_edf(3, 1, 6), 0.966, 150.0)]
    assert select("edf", scores).candidate == _edf(3, 1, 2)
    with pytest.raises(ValueError, match="fifo"):
        select("fifo", scores)


def test_edf_keeps_the_smallest_limits_that_reach_the_best_attainment() -> None:
    scores = [_score(_edf(3, 1, 6), 0.966, 170.0), _score(_edf(3, 1, 2), 0.966, 171.0),
              _score(_edf(3, 1, 1), 0.950, 160.0), _score(_edf(4, 4, 6), 0.64, 130.0)]
    assert select_edf(scores).candidate == _edf(3, 1, 2)
    # A tolerance admits near-best candidates, and the smallest of those wins.
    assert select_edf(scores, tolerance=0.02).candidate == _edf(3, 1, 1)
    with pytest.raises(ValueError):
        select_edf([])


def test_slack_gate_prefers_lower_latency_within_one_point() -> None:
    def sg(thr: float, v: int) -> Candidate:
        return Candidate("slack_gate", (("threshold", thr), ("limits", (v, 4, 6))))

    scores = [_score(sg(0.08, 1), 0.979, 157.0), _score(sg(0.02, 3), 0.976, 114.6),
              _score(sg(0.04, 2), 0.978, 133.9), _score(sg(0.02, 4), 0.961, 100.0)]
    assert select_slack_gate(scores).candidate == sg(0.02, 3)
    # Without the window only the best attainment counts.
    assert select_slack_gate(scores, window=0.0).candidate == sg(0.08, 1)


def test_scores_weigh_each_point_equally() -> None:
    cand = _edf(1, 1, 1)
    scores = score_candidates({
        (cand, "phases", 15): [_metrics(0.9, 100.0), _metrics(1.0, 120.0)],
        (cand, "bursty", 12): [_metrics(0.8, 50.0)],
    })
    (s,) = scores
    assert s.attainment == pytest.approx((0.95 + 0.8) / 2)
    assert s.latency_ms == pytest.approx((110.0 + 50.0) / 2)
    assert s.rounds["phases/15"] == [0.9, 1.0]
    assert s.to_dict()["params"] == {"limits": [1, 1, 1]}
    with pytest.raises(ValueError, match="no rounds"):
        score_candidates({(cand, "phases", 15): []})
