"""Calibration writes a rate-table file the core loads."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from xinfer_ros.cli import calibrate as calibrate_cli
from xinfer_ros.core.rate_table import load_rate_table
from xinfer_ros.core.stages import Stage
from xinfer_ros.engine.calibration import combinations


def test_combinations_respect_bounds_and_size() -> None:
    combos = combinations((2, 2, 2), 4)
    assert (0, 0, 0) not in combos
    assert all(sum(n) <= 4 and max(n) <= 2 for n in combos)
    assert len(combos) == 22
    assert combos[0] in {(0, 0, 1), (0, 1, 0), (1, 0, 0)}


def test_emulated_calibration_writes_a_loadable_table(tmp_path: Path) -> None:
    out = tmp_path / "table.json"
    rc = calibrate_cli.main(["--backend", "emulated", "--out", str(out), "--bounds", "1,1,1",
                             "--max-units", "2", "--window", "0.12", "--warmup", "0.03",
                             "--iso-repeats", "3"])
    assert rc == 0
    table = load_rate_table(out)
    assert table.bounds == (1, 1, 1)
    assert all(w > 0 for w in table.work)
    assert table.rate(0, (0, 0, 0)) == 1.0
    # Concurrency slows the emulated units, so rates with neighbours are below 1.
    shared = [rho for n, rates in table.rates.items() if sum(n) for rho in rates]
    assert shared and max(shared) < 1.1 and min(shared) < 0.9
    assert "xinfer-calibrate" in table.provenance


def _pi0_tiny_counting_batches() -> tuple[Any, list[int]]:
    """A pi0-tiny CPU backend and the sizes of the forwards it runs, appended as it runs."""
    from xinfer_ros.engine import make_backend

    backend = make_backend("torch", model="pi0-tiny", device="cpu", threads=1)
    sizes: list[int] = []
    run = backend.run_batch

    def spy(stage: Stage, states: Any, lane: Any) -> None:
        sizes.append(len(states))
        run(stage, states, lane)

    backend.run_batch = spy
    return backend, sizes


def test_batched_calibration_runs_units_as_the_engine_batches_them(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from xinfer_ros.engine import make_backend
    from xinfer_ros.engine.calibration import CalibrationSettings, calibrate

    with pytest.raises(ValueError, match="one at a time"):
        calibrate(make_backend("emulated"), CalibrationSettings(max_batch=2))
    backend, sizes = _pi0_tiny_counting_batches()
    result = calibrate(backend, CalibrationSettings(
        bounds=(0, 0, 2), max_units=3, window_s=0.2, warmup_s=0.05, iso_repeats=2,
        reference_units=1, max_batch=3))
    assert max(sizes) == 2  # n_A = 2 ran as one batch (on one loop thread)
    assert result.table.model["settings"]["max_batch"] == 3
    assert result.measured[(0, 0, 2)]["A"] > 0
    assert 0 < result.table.rate(2, (0, 0, 1)) <= 1.0


def test_factor_calibration_measures_cells_one_unit_per_lane_and_batches_alone(
        tmp_path: Path) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from xinfer_ros.core.batch_cost import BatchCost, batch_factors
    from xinfer_ros.core.predictor import Predictor
    from xinfer_ros.engine.calibration import CalibrationSettings, calibrate

    with pytest.raises(ValueError, match="max_batch >= 2"):
        CalibrationSettings(batch_factors=True)
    with pytest.raises(SystemExit, match="--batch-factors needs --max-batch"):
        calibrate_cli.main(["--backend", "emulated", "--batch-factors",
                            "--out", str(tmp_path / "x.json")])
    backend, sizes = _pi0_tiny_counting_batches()
    settings = CalibrationSettings(bounds=(0, 0, 2), max_units=3, window_s=0.2,
                                   warmup_s=0.05, iso_repeats=2, reference_units=1,
                                   max_batch=3, batch_factors=True)
    result = calibrate(backend, settings)
    backend.close()
    # Every combination ran one unit per lane; only the factor step ran batches, of
    # each size up to 3, per stage (three forwards each: one discarded, two timed).
    batched = [k for k in sizes if k > 1]
    assert batched == [2] * 3 + [3] * 3 + [2] * 3 + [3] * 3 + [2] * 3 + [3] * 3
    factors = batch_factors(result.table)
    assert factors is not None
    for f in factors:
        assert f[0] == 1.0 and list(f) == sorted(f) and len(f) == 3
    # The table prices batches of 3 at every stage although its ViT bound is 0.
    cost = BatchCost(Predictor(result.table), 3)
    assert cost.duration(Stage.VIT, 3, (0, 0, 0)) >= cost.duration(Stage.VIT, 1, (0, 0, 0))
    path = tmp_path / "t.json"
    from xinfer_ros.core.rate_table import write_rate_table

    assert batch_factors(load_rate_table(write_rate_table(result.table, path))) == factors


def test_monotone_calibration_writes_rates_in_order(tmp_path: Path, capsys) -> None:
    from xinfer_ros.core.rate_monotone import monotone_rates

    out = tmp_path / "table.json"
    rc = calibrate_cli.main(["--backend", "emulated", "--out", str(out), "--bounds", "1,1,1",
                             "--max-units", "2", "--window", "0.12", "--warmup", "0.03",
                             "--iso-repeats", "3", "--monotone"])
    assert rc == 0
    assert "--monotone: " in capsys.readouterr().out
    table = load_rate_table(out)
    # Already in order: projecting again moves nothing.
    assert monotone_rates(table)[1] == 0
