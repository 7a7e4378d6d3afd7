"""Shared fixtures of the reference-model tests: tiny preset, one thread, offline."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from xinfer_ros.model.config import VLAConfig
    from xinfer_ros.model.synthetic import SyntheticInputs
    from xinfer_ros.model.vla import ReferenceVLA

# Nothing may reach the network: transformers must never try the Hub.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"


@pytest.fixture(scope="session")
def tiny_config() -> VLAConfig:
    from xinfer_ros.model.config import load_preset

    return load_preset("tiny")


@pytest.fixture(scope="session")
def tiny_model(tiny_config: VLAConfig) -> ReferenceVLA:
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    # One intra-op thread: fastest for the tiny matrices and fair to the shared CPU.
    torch.set_num_threads(1)
    from xinfer_ros.model.vla import ReferenceVLA

    return ReferenceVLA.build(tiny_config)


@pytest.fixture
def raw_inputs(tiny_config: VLAConfig) -> SyntheticInputs:
    from xinfer_ros.model.synthetic import synthetic_inputs

    return synthetic_inputs(tiny_config, seed=3)
