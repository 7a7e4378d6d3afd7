"""Rate table: shipped default, JSON format, validation errors."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from xinfer_ros.core import RateTable, RateTableError, load_rate_table, write_rate_table
from xinfer_ros.core.constants import DEFAULT_BOUNDS, H_OUT, H_STAGE, W_STAGE
from xinfer_ros.core.rate_table import (
    DEFAULT_RATE_TABLE_PATH,
    default_rate_table,
    interference_model_table,
    resolve_rate_table,
    validate_rate_table_file,
)

ROOT = Path(__file__).resolve().parents[2]


def test_shipped_default_has_paper_constants_and_documented_model():
    t = load_rate_table(ROOT / "config" / "rate_table_default.json")
    assert t.work == pytest.approx(W_STAGE)
    assert t.overhead == pytest.approx(H_STAGE)
    assert t.h_out == pytest.approx(H_OUT)
    assert t.bounds == DEFAULT_BOUNDS
    assert len(t.rates) == math.prod(c + 1 for c in DEFAULT_BOUNDS)
    assert "Synthetic interference model" in t.assumptions
    assert t.provenance and t.model["alpha_rows_stage_cols_V_P_A"]
    # The file is exactly what the documented generator produces.
    assert t.to_json_dict() == json.loads(json.dumps(interference_model_table().to_json_dict()))


def test_shipped_default_satisfies_its_stated_assumptions():
    t = load_rate_table(DEFAULT_RATE_TABLE_PATH)
    assert t.rates[(0, 0, 0)] == (1.0, 1.0, 1.0)
    for (v, p, a), rho in t.rates.items():
        for k, nxt in enumerate([(v + 1, p, a), (v, p + 1, a), (v, p, a + 1)]):
            if nxt in t.rates:  # monotone non-increasing in every count
                assert all(x >= y for x, y in zip(rho, t.rates[nxt], strict=True)), (k, nxt)
    # k Action units together: more throughput than one, less than k times.
    for k in range(2, DEFAULT_BOUNDS[2] + 2):
        thr = k * t.rates[(0, 0, k - 1)][2]
        assert 1.0 < thr < k


def test_roundtrip(tmp_path):
    t = interference_model_table(bounds=(1, 2, 1))
    p = write_rate_table(t, tmp_path / "t.json")
    back = load_rate_table(p)
    assert back.bounds == (1, 2, 1)
    assert back.rate(2, (1, 2, 1)) == pytest.approx(t.rate(2, (1, 2, 1)))
    assert validate_rate_table_file(p) == []


def _file(tmp_path, mutate) -> Path:
    data = interference_model_table(bounds=(1, 1, 1)).to_json_dict()
    mutate(data)
    p = tmp_path / "bad.json"
    p.write_text(json.dumps(data))
    return p


def test_missing_entry_is_rejected(tmp_path):
    p = _file(tmp_path, lambda d: d["entries"].pop(3))
    with pytest.raises(RateTableError, match=r"missing 1 of 8 grid entries.*\(0, 1, 1\)"):
        load_rate_table(p)


def test_negative_rate_is_rejected_naming_it(tmp_path):
    def neg(d):
        d["entries"][2]["rho"][1] = -0.5
    with pytest.raises(RateTableError, match=r"n=\[0, 1, 0\].*rho_P=-0.5"):
        load_rate_table(_file(tmp_path, neg))


def test_negative_work_and_missing_stage_are_rejected(tmp_path):
    def neg_w(d):
        d["work_ms"]["A"] = -1.0
    with pytest.raises(RateTableError, match=r"work_ms\[A\].*-1.0"):
        load_rate_table(_file(tmp_path, neg_w))

    def no_stage(d):
        del d["overhead_ms"]["P"]
    with pytest.raises(RateTableError, match=r"overhead_ms.*lacks stage.*'P'"):
        load_rate_table(_file(tmp_path, no_stage))

    def no_key(d):
        del d["h_out_ms"]
    with pytest.raises(RateTableError, match="missing key 'h_out_ms'"):
        load_rate_table(_file(tmp_path, no_key))

    def version(d):
        d["schema_version"] = 99
    with pytest.raises(RateTableError, match="schema_version 99"):
        load_rate_table(_file(tmp_path, version))


def test_bad_objects_are_rejected():
    with pytest.raises(RateTableError, match=r"rate at n=\(0, 0, 0\)\[V\].*0.0"):
        RateTable.from_function(lambda s, n: 0.0, bounds=(0, 0, 0))
    with pytest.raises(RateTableError, match="outside the bounds"):
        RateTable(W_STAGE, H_STAGE, H_OUT, (0, 0, 0), {(0, 0, 0): (1, 1, 1), (1, 0, 0): (1, 1, 1)})
    with pytest.raises(RateTableError, match=r"cannot read rate table .*nope.json"):
        load_rate_table("/nonexistent/nope.json")


def test_generator_script_check_mode():
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "rate_table_generate.py"),
                           "--check"], capture_output=True, text=True, cwd=ROOT, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "up to date" in proc.stdout


def test_resolve_rate_table_is_the_one_loader(tmp_path: Path) -> None:
    shipped = default_rate_table()
    # An unset option or ROS parameter means the shipped table, parsed once.
    assert resolve_rate_table(None) is shipped and resolve_rate_table("") is shipped
    slower = interference_model_table(work=tuple(2 * w for w in W_STAGE))
    path = write_rate_table(slower, tmp_path / "t.json")
    first = resolve_rate_table(path)
    assert resolve_rate_table(str(path)) is first
    assert first.isolated_request_s != shipped.isolated_request_s
    with pytest.raises(RateTableError, match="does not exist"):
        resolve_rate_table(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text("{", encoding="utf-8")
    with pytest.raises(RateTableError, match="cannot read"):
        resolve_rate_table(tmp_path / "bad.json")


def test_work_scaled_by_learned_factors_keeps_the_interference_pattern() -> None:
    from xinfer_ros.core.rate_table import default_rate_table

    table = default_rate_table()
    slower = table.with_work_scaled((2.0, 1.5, 1.0), "a test")
    assert slower.work == pytest.approx((2.0 * table.work[0], 1.5 * table.work[1],
                                         table.work[2]))
    assert slower.rates == table.rates and slower.overhead == table.overhead
    assert slower.provenance.endswith("work scaled by (2, 1.5, 1): a test")
    with pytest.raises(RateTableError):
        table.with_work_scaled((1.0, 0.0, 1.0), "a factor of 0")


def test_batch_model_table_costs_batches_as_stated() -> None:
    """The GPU batch model: g_s(m) = 1 + β_s (m − 1) per batch, N = 1 is the default."""
    from xinfer_ros.core.batch_cost import BatchCost, table_batch_bound
    from xinfer_ros.core.predictor import Predictor
    from xinfer_ros.core.rate_table import (
        DEFAULT_BATCH_BETA,
        DEFAULT_BATCH_BOUNDS,
        DEFAULT_BATCH_RATE_TABLE_PATH,
    )

    # One unit per batch is the unbatched model: ρ_s(n) = 1 / (1 + Σ α[s][j] n_j).
    alpha = ((0.3, 0.2, 0.1), (0.2, 0.4, 0.1), (0.1, 0.2, 0.3))
    one = interference_model_table(alpha, max_batch=1, bounds=(2, 2, 2))
    for n, rates in one.rates.items():
        assert rates == pytest.approx([1 / (1 + sum(alpha[s][j] * n[j] for j in range(3)))
                                       for s in range(3)])
    shipped = load_rate_table(DEFAULT_BATCH_RATE_TABLE_PATH)
    assert shipped.bounds == DEFAULT_BATCH_BOUNDS
    assert table_batch_bound(shipped) == (4, 4, 4)
    assert shipped.model["batch_cost"] == {"form": "g_s(m) = 1 + beta_s (m - 1)",
                                           "beta_V_P_A": list(DEFAULT_BATCH_BETA)}
    assert "synthetic batch-cost model" in shipped.assumptions
    cost = BatchCost(Predictor(shipped), 4)
    for s in range(3):
        alone = shipped.overhead[s] + shipped.work[s]
        for k, d in enumerate(cost.durations(s, (0, 0, 0)), start=1):
            assert d == pytest.approx(shipped.overhead[s] +
                                      shipped.work[s] * (1 + DEFAULT_BATCH_BETA[s] * (k - 1)))
        # Stacking never costs more than running the members one after another.
        assert cost.duration(s, 4, (0, 0, 0)) <= 4 * alone
    # Another stage's batch of two interferes as 1 + β of a unit, not as two units.
    a = interference_model_table().model["alpha_rows_stage_cols_V_P_A"]
    rho = shipped.rate(2, (2, 0, 0))  # two ViT units: one batch of two
    assert rho == pytest.approx(1 / (1 + a[2][0] * (1 + DEFAULT_BATCH_BETA[0])))  # type: ignore[index]


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"max_batch": 0}, "max_batch must be an integer >= 1"),
    ({"max_batch": 2, "batch_beta": (0.1, 0.2)}, "batch_beta must be three values"),
    ({"max_batch": 2, "batch_beta": (0.1, 0.2, 1.5)}, "batch_beta must be three values"),
])
def test_batch_model_table_refuses_bad_settings(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(RateTableError, match=match):
        interference_model_table(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize("path", sorted((ROOT / "config").glob("rate_table_*.json")),
                         ids=lambda p: p.name)
def test_every_shipped_table_loads_and_says_how_it_was_measured(path: Path) -> None:
    table = load_rate_table(path)
    assert table.provenance
    if "compiled" in path.name:  # torch.compile: says so, and its Action unit is faster
        assert "compile=on" in table.provenance
        eager = load_rate_table(ROOT / "config" / path.name.replace("_compiled", ""))
        assert table.work[2] < 0.7 * eager.work[2]  # Action, about half
