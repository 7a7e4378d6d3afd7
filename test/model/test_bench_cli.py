"""``xinfer-bench model`` runs and reports per-stage latency and FLOPs."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path

import json

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from xinfer_ros.cli import bench

pytestmark = pytest.mark.torch


def test_bench_model_tiny_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "tiny.json"
    rc = bench.main(
        ["model", "--model", "tiny", "--iters", "3", "--warmup", "1", "--json", str(out)]
    )
    assert rc == 0
    text = capsys.readouterr().out
    for stage in ("vit", "prefill", "action", "request"):
        assert stage in text
    data = json.loads(out.read_text())
    assert data["model"] == "tiny"
    assert data["prefix_len"] > 217
    for stage in ("vit", "prefill", "action"):
        timing = data["timings_ms"][stage]
        assert 0 < timing["median_ms"] <= timing["p99_ms"] + 1e-9
        assert data["flops"][stage] > 0
    parts = sum(data["timings_ms"][s]["median_ms"] for s in ("vit", "prefill", "action"))
    assert data["timings_ms"]["request"]["median_ms"] >= 0.5 * parts


def test_bench_model_flops_only(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "flops.json"
    rc = bench.main(["model", "--model", "tiny", "--flops-only", "--json", str(out)])
    assert rc == 0
    assert "GFLOP" in capsys.readouterr().out
    data = json.loads(out.read_text())
    assert set(data["flops"]) == {"vit", "prefill", "action"}
    assert "timings_ms" not in data
