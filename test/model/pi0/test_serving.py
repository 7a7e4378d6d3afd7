"""pi0-tiny through the engine's torch backend, calibration, benchmarks and FLOPs."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from xinfer_ros.core.stages import Stage  # noqa: E402
from xinfer_ros.engine import EngineConfig, StageEngine, Status, make_backend  # noqa: E402

from ..helpers import first_and_rtc  # noqa: E402

pytestmark = pytest.mark.torch


@pytest.fixture(scope="module")
def backend() -> Any:
    return make_backend("torch", model="pi0-tiny", device="cpu", threads=1)


def test_engine_serves_rtc_chunks_of_the_checkpoints_horizon(backend: Any) -> None:
    assert backend.action_shape == (50, 14) and backend.describe()["family"] == "pi0"
    with StageEngine(backend, "xinfer", EngineConfig(slots=(2, 2, 2))) as engine:
        first = engine.submit(backend.example_inputs(0, None), 5.0, "r0").result(60)
        rtc = engine.submit(backend.example_inputs(0, first.actions), 5.0, "r0").result(60)
        full = backend.example_inputs(1, None)
        masked = dataclasses.replace(full, images=(full.images[0], None, full.images[2]))
        partial = engine.submit(masked, 5.0, "r1").result(60)
        bad = dataclasses.replace(backend.example_inputs(2, None), state=np.zeros(40))
        rejected = engine.submit(bad, 5.0, "r2").result(60)
        after = engine.submit(backend.example_inputs(2, None), 5.0, "r2").result(60)
    for result in (first, rtc, partial, after):
        assert result.status is Status.OK, result.reason
        assert result.actions.shape == (50, 14) and np.all(np.isfinite(result.actions))
    # Committed keyframes: the previous chunk's, bit for bit (d = 8, shifted by 8).
    np.testing.assert_array_equal(rtc.actions[:8], first.actions[8:16])
    assert rejected.status is Status.REJECTED and "max_state_dim 32" in rejected.reason


def test_action_worker_processes_match_in_thread_action(backend: Any) -> None:
    workers = make_backend("torch", model="pi0-tiny", device="cpu", threads=1,
                           action_processes=1)
    try:
        assert len(workers.action_worker_pids) == 1
        (a0, b0), (a1, b1) = first_and_rtc(backend), first_and_rtc(workers)
        np.testing.assert_array_equal(a0, a1)
        np.testing.assert_array_equal(b0, b1)
    finally:
        workers.close()


def test_calibration_states_are_independent(backend: Any) -> None:
    fresh = backend.state_factory()
    one, two = fresh(Stage.ACTION), fresh(Stage.ACTION)
    assert one.prefix_kv is not two.prefix_kv
    for state in (one, two):
        backend.run_stage(Stage.ACTION, state, None)
    np.testing.assert_array_equal(backend.finish(one), backend.finish(two))
    vit = fresh(Stage.VIT)
    backend.run_stage(Stage.VIT, vit, None)
    prefill = fresh(Stage.PREFILL)
    backend.run_stage(Stage.PREFILL, prefill, None)
    assert [k.shape for k, _ in prefill.prefix_kv] == [k.shape for k, _ in one.prefix_kv]


def test_worker_processes_load_the_same_checkpoint(tmp_path: Path) -> None:
    from xinfer_ros.model.loading import load_stage_model
    from xinfer_ros.model.pi0.checkpoint import save_checkpoint
    from xinfer_ros.model.pi0.tokenizer import offline_tokenizer

    from .conftest import robot_preset, write_stats

    preset = robot_preset(tmp_path, cameras=1)
    source = load_stage_model("pi0-tiny", seed=5)
    ckpt = save_checkpoint(source.module, tmp_path / "ckpt", tokenizer=offline_tokenizer())
    write_stats(ckpt, "openpi", dim=7)
    be = make_backend("torch", model=str(preset), model_path=str(ckpt), action_processes=1)
    try:
        with StageEngine(be, "fifo", EngineConfig(slots=(1, 1, 1))) as engine:
            result = engine.submit(be.example_inputs(0, None), 5.0, "r").result(60)
        assert result.ok and result.actions.shape == (50, 7)
    finally:
        be.close()


def test_bench_model_reports_pi0_tiny_stage_times(tmp_path: Path) -> None:
    from xinfer_ros.cli import bench

    out = tmp_path / "pi0.json"
    assert bench.main(["model", "--model", "pi0-tiny", "--iters", "3", "--warmup", "1",
                       "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert (data["model"], data["horizon"]) == ("pi0-tiny", 50)
    assert data["prefix_len"] == 3 * 64 + 64  # 3 cameras of 8x8 patches, a 64-token prompt
    for stage in ("vit", "prefill", "action"):
        assert data["timings_ms"][stage]["median_ms"] > 0 and data["flops"][stage] > 0


def _linear(module: torch.nn.Module) -> int:
    return sum(m.weight.numel() for m in module.modules() if isinstance(m, torch.nn.Linear))


def test_pi0_flops_match_analytic_counts() -> None:
    from xinfer_ros.model.flops import count_stage_flops
    from xinfer_ros.model.loading import load_stage_model

    model = load_stage_model("pi0-tiny", device="meta")
    free = count_stage_flops("pi0-tiny", rtc=False)
    guided = count_stage_flops("pi0-tiny", rtc=True)
    config = model.module.config
    text, dit = config.vlm_config.text_config, config.dit_config
    prefix, tokens = free["prefix_len"], config.chunk_size + 1
    prefill = 2 * prefix * _linear(model.module.model.vlm.language_model)
    prefill += text.num_hidden_layers * 4 * prefix * prefix * text.num_attention_heads \
        * text.head_dim
    assert free["prefill"] == pytest.approx(prefill, rel=0.01)
    step = 2 * tokens * _linear(model.module.model.dit)
    step += 2 * config.chunk_size * (_linear(model.module.embed_action_time)
                                     - model.module.embed_action_time.state_proj.weight.numel()
                                     + model.module.action_out_proj.weight.numel())
    step += 2 * model.module.embed_action_time.state_proj.weight.numel()
    step += dit.num_hidden_layers * 4 * tokens * (prefix + tokens) * dit.num_attention_heads \
        * dit.head_dim
    assert free["action"] == pytest.approx(config.num_inference_steps * step, rel=0.01)
    assert 2.0 * free["action"] <= guided["action"] <= 3.5 * free["action"]
    real = count_stage_flops("pi0", rtc=True)
    # π0 at its real shapes: ~0.66 TFLOP of SigLIP, ~3.3 TFLOP of prefill, guided Action.
    assert 0.6e12 < real["vit"] < 0.7e12 and 3.0e12 < real["prefill"] < 3.6e12
    assert os.environ.get("HF_HUB_OFFLINE") == "1"
