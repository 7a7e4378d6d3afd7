"""Torch-backend options shared by xinfer-bench engine and xinfer-calibrate."""

from __future__ import annotations

import argparse

import pytest

from xinfer_ros.cli.torch_options import add_torch_arguments, stage_counts
from xinfer_ros.engine.affinity import available_cpus


def test_stage_counts_parse_and_name_the_bad_value() -> None:
    assert stage_counts()("1, 2,3") == (1, 2, 3)
    assert stage_counts(minimum=0)("0,0,4") == (0, 0, 4)
    for text in ("1,2", "1,x,2", "1,2,3,4"):
        with pytest.raises(argparse.ArgumentTypeError, match=repr(text)):
            stage_counts()(text)
    with pytest.raises(argparse.ArgumentTypeError, match=">= 0"):
        stage_counts(minimum=0)("1,-1,2")


def test_both_tools_get_the_same_backend_options() -> None:
    parser = argparse.ArgumentParser()
    add_torch_arguments(parser)
    cpu = min(available_cpus())
    args = parser.parse_args(["--action-processes", "2", "--main-cpus", str(cpu),
                              "--action-cpus", str(cpu)])
    assert (args.model, args.device, args.threads) == ("pi0-tiny", "cpu", 1)
    assert args.action_processes == 2
    assert args.main_cpus == (cpu,) and args.action_cpus == (cpu,)
    with pytest.raises(SystemExit):
        parser.parse_args(["--action-cpus", str(max(available_cpus()) + 1000)])
