"""Request contract: deadline, stage states, validation errors that name the value."""

from __future__ import annotations

import math

import pytest

from xinfer_ros.core import InvalidRequestError, Request, Stage, StageState
from xinfer_ros.core.constants import DELTA


def test_deadline_and_initial_states():
    payload = {"prev_chunk": [1, 2, 3], "d": 8}
    r = Request(5, "robot_3", arrival=1.5, budget=0.090, payload=payload)
    assert r.deadline == pytest.approx(1.5 + 0.090 - DELTA)
    assert r.states == [StageState.READY, StageState.WAITING, StageState.WAITING]
    assert r.stage is Stage.VIT and not r.done
    assert r.payload is payload  # passed through untouched
    assert r.slack(1.5, 0.030) == pytest.approx(0.090 - DELTA - 0.030)


@pytest.mark.parametrize("budget, shown", [(0.0, "0.0"), (-0.09, "-0.09"), (math.nan, "nan"),
                                           (math.inf, "inf"), ("90ms", "'90ms'"),
                                           (None, "None")])
def test_bad_budget_is_rejected_naming_the_value(budget, shown):
    with pytest.raises(InvalidRequestError, match=rf"request 7: budget .*{shown}"):
        Request(7, "r", arrival=0.0, budget=budget)


def test_bad_arrival_and_id():
    with pytest.raises(InvalidRequestError, match=r"arrival must be finite, got nan"):
        Request(1, "r", arrival=math.nan, budget=0.1)
    with pytest.raises(InvalidRequestError, match=r"request_id must be an int, got '1'"):
        Request("1", "r", arrival=0.0, budget=0.1)  # type: ignore[arg-type]
    with pytest.raises(InvalidRequestError, match=r"delta must be >= 0, got -0.001"):
        Request(1, "r", arrival=0.0, budget=0.1, delta=-0.001)


def test_from_dict_with_all_stages():
    r = Request.from_dict({"request_id": 3, "robot_id": "a", "arrival": 0.0, "budget": 0.4,
                           "stages": {"V": "done", "P": "ready", "A": "waiting"}})
    assert r.states == [StageState.DONE, StageState.READY, StageState.WAITING]
    assert r.stage is Stage.PREFILL


def test_from_dict_missing_stage_is_rejected_naming_it():
    with pytest.raises(InvalidRequestError, match=r"request 3 is missing stage\(s\) ACTION"):
        Request.from_dict({"request_id": 3, "robot_id": "a", "arrival": 0.0, "budget": 0.4,
                           "stages": {"V": "done", "P": "ready"}})


def test_from_dict_rejects_bad_records():
    with pytest.raises(InvalidRequestError, match="missing budget"):
        Request.from_dict({"request_id": 3, "robot_id": "a", "arrival": 0.0})
    with pytest.raises(InvalidRequestError, match=r"bad stage entry 'X'"):
        Request.from_dict({"request_id": 3, "robot_id": "a", "arrival": 0.0, "budget": 0.4,
                           "stages": {"V": "done", "P": "ready", "X": "waiting"}})
    with pytest.raises(InvalidRequestError, match="done after an unfinished stage"):
        Request.from_dict({"request_id": 3, "robot_id": "a", "arrival": 0.0, "budget": 0.4,
                           "stages": {"V": "ready", "P": "waiting", "A": "done"}})
    with pytest.raises(InvalidRequestError, match="two active stages"):
        Request.from_dict({"request_id": 3, "robot_id": "a", "arrival": 0.0, "budget": 0.4,
                           "stages": {"V": "running", "P": "ready", "A": "waiting"}})


def test_stage_parse():
    assert Stage.parse("P") is Stage.PREFILL
    assert Stage.parse("action") is Stage.ACTION
    assert Stage.parse(0) is Stage.VIT
    assert [s.short for s in Stage] == ["V", "P", "A"]
    with pytest.raises(ValueError, match="unknown stage 'Q'"):
        Stage.parse("Q")
