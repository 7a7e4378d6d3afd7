"""The stage split of π0 equals transformers' own sample_actions on identical tensors."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from xinfer_ros.model.pi0 import stages  # noqa: E402
from xinfer_ros.model.pi0.checkpoint import save_checkpoint  # noqa: E402
from xinfer_ros.model.pi0.parity import PARITY_TOLERANCE, check_parity  # noqa: E402
from xinfer_ros.model.synthetic import synthetic_inputs  # noqa: E402

pytestmark = pytest.mark.torch


def _sample_actions(model: Any, prepared: Any, pixels: torch.Tensor | None = None,
                    camera_mask: torch.Tensor | None = None) -> torch.Tensor:
    inputs = stages.model_inputs(model, prepared)
    with torch.no_grad():
        return model.sample_actions(
            state=inputs.state, input_ids=inputs.input_ids,
            pixel_values=inputs.pixel_values if pixels is None else pixels,
            noise=stages.sample_noise(model, prepared.seed),
            attention_mask=inputs.attention_mask,
            pixel_attention_mask=inputs.pixel_attention_mask if camera_mask is None
            else camera_mask)


def test_stage_split_equals_sample_actions_for_several_requests(pi0_tiny: Any) -> None:
    for seed in range(3):
        inputs = synthetic_inputs(pi0_tiny.io, seed=seed)
        state = pi0_tiny.prepare(inputs.images, f"task {seed}: stack the cups", inputs.state,
                                 seed=100 + seed)
        result = check_parity(pi0_tiny.module, state.prepared)
        assert result.shape == (1, 50, 32)
        assert result.max_abs_value > 0.1  # a real chunk, not zeros
        assert result.max_abs_diff <= PARITY_TOLERANCE


def test_missing_camera_equals_transformers_pixel_attention_mask(pi0_tiny: Any) -> None:
    inputs = synthetic_inputs(pi0_tiny.io, seed=4)
    images = [inputs.images[0], None, inputs.images[2]]  # the middle camera is missing
    state = pi0_tiny.prepare(images, "open the drawer", inputs.state, seed=5)
    assert state.prepared.camera_mask == (True, False, True)
    ours = stages.run_request(pi0_tiny.module, state)
    # transformers' way: all three camera slots, the missing one zero and masked out
    present = stages.model_inputs(pi0_tiny.module, state.prepared).pixel_values
    padded = torch.zeros((1, 3, *present.shape[2:]))
    padded[0, 0], padded[0, 2] = present[0, 0], present[0, 1]
    theirs = _sample_actions(pi0_tiny.module, state.prepared, padded,
                             torch.tensor([[True, False, True]]))
    assert (ours - theirs).abs().max().item() <= PARITY_TOLERANCE
    full = pi0_tiny.prepare(inputs.images, "open the drawer", inputs.state, seed=5)
    assert not torch.allclose(stages.run_request(pi0_tiny.module, full), ours)


def test_engine_serves_several_robots_with_sample_actions_results(pi0_tiny: Any) -> None:
    from xinfer_ros.engine import EngineConfig, StageEngine, make_backend

    backend = make_backend("torch", model="pi0-tiny", device="cpu", threads=1)
    robots = [dataclasses.replace(backend.example_inputs(i, None),
                                  instruction=f"robot {i}: sort parcels")
              for i in range(3)]
    with StageEngine(backend, "fifo", EngineConfig(slots=(1, 1, 1))) as engine:
        results = [engine.submit(inputs, 5.0, f"r{i}").result(60)
                   for i, inputs in enumerate(robots)]
    for i, (inputs, result) in enumerate(zip(robots, results, strict=True)):
        assert result.ok, result.reason
        assert result.actions.shape == (50, 14)
        state = pi0_tiny.prepare(inputs.images, inputs.instruction, inputs.state,
                                 seed=inputs.seed)
        expected = pi0_tiny.processor.postprocess(
            _sample_actions(pi0_tiny.module, state.prepared), None)
        np.testing.assert_allclose(result.actions, expected, rtol=0, atol=1e-4,
                                   err_msg=f"robot {i}")
    assert not np.allclose(results[0].actions, results[1].actions)


def test_bench_parity_cli_on_an_unseen_save_pretrained_checkpoint(
        unseen_model: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from xinfer_ros.cli import bench

    ckpt = tmp_path / "unseen"
    unseen_model.save_pretrained(str(ckpt))  # transformers' own: config.json + weights only
    out = tmp_path / "parity.json"
    rc = bench.main(["model", "--model", "pi0", "--model-path", str(ckpt), "--parity",
                     "--iters", "2", "--json", str(out)])
    assert rc == 0
    report = json.loads(out.read_text())
    assert report["ok"] and report["max_abs_diff"] <= 1e-5
    assert report["shape"] == [1, 12, 24]  # the checkpoint's chunk, not the preset's
    assert "max_abs_diff" in capsys.readouterr().out


def test_parity_cli_fails_loudly_when_the_split_diverges(
        unseen_model: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from xinfer_ros.cli import bench
    from xinfer_ros.model.pi0 import parity

    ckpt = save_checkpoint(unseen_model, tmp_path / "ckpt")
    real = stages.run_request

    def skewed(model: Any, req: Any, guidance: bool = True) -> torch.Tensor:
        return real(model, req, guidance) + 1e-3

    monkeypatch.setattr(parity.stages, "run_request", skewed)
    out = tmp_path / "parity.json"
    rc = bench.main(["model", "--model", "pi0", "--model-path", str(ckpt), "--parity",
                     "--iters", "1", "--json", str(out)])
    assert rc == 1
    assert json.loads(out.read_text())["ok"] is False


def test_parity_refuses_rtc_requests(pi0_tiny: Any) -> None:
    inputs = synthetic_inputs(pi0_tiny.io)
    state = pi0_tiny.prepare(inputs.images, "go", inputs.state, prev_chunk=inputs.prev_chunk,
                             d=4)
    with pytest.raises(ValueError, match="real-time chunking"):
        check_parity(pi0_tiny.module, state.prepared)
