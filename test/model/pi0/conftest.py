"""Fixtures of the π0 tests: the pi0-tiny model, small random checkpoints, offline."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

# Nothing may reach the network: transformers must never try the Hub.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

#: A π0 config none of the shipped presets uses: odd widths, 3 layers, chunk 12, 4 steps,
#: 24-dim padding, 56 px images of 14 px patches (16 tokens per camera).
UNSEEN_CONFIG: dict[str, Any] = {
    "chunk_size": 12, "num_inference_steps": 4, "max_state_dim": 24, "max_action_dim": 24,
    "vlm_config": {
        "model_type": "paligemma", "projection_dim": 48, "image_token_id": 300,
        "text_config": {"model_type": "gemma", "hidden_size": 48, "num_hidden_layers": 3,
                        "intermediate_size": 80, "num_attention_heads": 3,
                        "num_key_value_heads": 1, "head_dim": 16, "vocab_size": 300},
        "vision_config": {"model_type": "siglip_vision_model", "hidden_size": 24,
                          "intermediate_size": 40, "num_hidden_layers": 1,
                          "num_attention_heads": 2, "patch_size": 14, "image_size": 56,
                          "vision_use_head": False},
    },
    "dit_config": {"model_type": "gemma", "hidden_size": 40, "num_hidden_layers": 3,
                   "intermediate_size": 56, "num_attention_heads": 2,
                   "num_key_value_heads": 1, "head_dim": 16},
}


@pytest.fixture(scope="session")
def pi0_tiny() -> Any:
    """The pi0-tiny preset served through the StageModel interface (one thread)."""
    torch.set_num_threads(1)
    from xinfer_ros.model.loading import load_stage_model

    return load_stage_model("pi0-tiny")


@pytest.fixture(scope="session")
def unseen_model() -> Any:
    """A random PI0ForConditionalGeneration of :data:`UNSEEN_CONFIG` (seeded)."""
    from transformers import PI0Config, PI0ForConditionalGeneration

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(11)
        return PI0ForConditionalGeneration(PI0Config(**UNSEEN_CONFIG)).eval()


def write_stats(directory: Path, layout: str, dim: int = 7, seed: int = 0) -> dict[str, Any]:
    """Write normalisation statistics in ``layout`` (openpi or lerobot); return them."""
    from xinfer_ros.model.pi0.checkpoint import write_lerobot_pipeline, write_openpi_stats

    rng = np.random.default_rng(seed)
    state = {"mean": rng.normal(size=dim), "std": rng.uniform(0.2, 2.0, dim)}
    action = {"mean": rng.normal(size=dim), "std": rng.uniform(0.2, 2.0, dim)}
    if layout == "lerobot":
        write_lerobot_pipeline(directory, state, action)
    else:
        write_openpi_stats(directory, state, action)
    return {"state": state, "action": action}


def robot_preset(tmp_path: Path, *, cameras: int = 2, state_dim: int = 7,
                 action_dim: int = 7, **extra: Any) -> Path:
    """A π0 preset file of a robot with ``cameras`` cameras and 7 joints."""
    import yaml

    data = {"name": "test-robot", "family": "pi0", "transformers_config": {},
            "robot": {"cameras": [f"cam_{i}" for i in range(cameras)],
                      "state_dim": state_dim, "action_dim": action_dim},
            "prompt_tokens": 64, **extra}
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "robot.yaml"
    path.write_text(yaml.safe_dump(data))
    return path
