"""The standalone CLI's arguments and the openpi transport benchmark (smoke)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from xinfer_ros.cli import bench_openpi
from xinfer_ros.cli.serve import _build_engine, _config, build_parser, main, server_params
from xinfer_ros.openpi.server import ServerConfig


def test_serve_requires_openpi_and_defaults_to_loopback() -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args([])
    args = build_parser().parse_args(["--openpi", "--port", "0", "--allow", "a", "b",
                                      "--layout", "libero"])
    p = server_params(args)
    config, default = _config(args, p), ServerConfig()
    assert config.host == "127.0.0.1" and config.allowlist == ("a", "b")
    # Limits not given are the endpoint's own defaults.
    assert config.max_message_bytes == default.max_message_bytes == 16 * 1024 * 1024
    assert config.max_connections == default.max_connections
    assert config.default_budget_ms == default.default_budget_ms == 180.0
    args.max_connections = 3
    assert _config(args, p).max_connections == 3


#: The torch backend's table in config/fleet.yaml.
TORCH_TABLE = "rate_table_cpu_pi0_tiny_batch4_factors.json"


def test_serve_runs_the_servers_shipped_configuration() -> None:
    """Without flags xinfer-serve serves what the node serves: config/fleet.yaml."""
    p = server_params(build_parser().parse_args(["--openpi"]))
    assert p["backend"] == "torch" and p["model"] == "pi0-tiny" and p["policy"] == "xinfer"
    assert p["torch.slots"] == [4, 4, 8] and p["torch.action_processes"] == 2
    assert (p["torch.max_batch"], p["torch.batch_when"]) == (4, "saturated")
    assert p["torch.rate_table"] == TORCH_TABLE
    assert p["phase_spread"] is True
    # A flag overrides its parameter; --rate-table is the chosen backend's.
    p = server_params(build_parser().parse_args(
        ["--openpi", "--backend", "emulated", "--rate-table", "t.json", "--max-live", "7"]))
    assert p["backend"] == "emulated" and p["emulated.rate_table"] == "t.json"
    assert p["max_live_requests"] == 7 and p["torch.rate_table"] == TORCH_TABLE


def test_serve_builds_the_engine_the_parameter_file_describes(tmp_path: Path) -> None:
    params = tmp_path / "server.yaml"
    params.write_text(
        "inference_server:\n  ros__parameters:\n    backend: emulated\n"
        "    policy: edf\n    max_live_requests: 9\n    shed_doomed: true\n"
        "    emulated:\n      slots: [2, 2, 3]\n")
    p = server_params(build_parser().parse_args(["--openpi", "--params-file", str(params)]))
    engine = _build_engine(p)
    try:
        assert engine.config.slots == (2, 2, 3) and engine.config.max_live == 9
        assert engine.config.shed_doomed  # off unless the file says so
        assert engine.policy.name == "edf" and engine.backend.emulated
    finally:
        engine.close(drain_timeout=0.1)


@pytest.mark.parametrize(("body", "words"), [
    ("    torch:\n      slot: [1, 1, 2]\n", "unknown parameter 'torch.slot'"),
    ("    max_budget_ms: 100\n", "parameter 'max_budget_ms' cannot be 100: a float"),
    ("    policy: fastest\n", "parameter 'policy'='fastest'"),
])
def test_serve_refuses_a_parameter_file_it_would_misread(tmp_path: Path, capsys, body: str,
                                                         words: str) -> None:
    params = tmp_path / "server.yaml"
    params.write_text("inference_server:\n  ros__parameters:\n" + body)
    assert main(["--openpi", "--port", "0", "--params-file", str(params)]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert str(params) in line and words in line


def test_serve_refuses_an_invalid_flag_value(capsys) -> None:
    assert main(["--openpi", "--port", "0", "--backend", "emulated", "--max-live", "0"]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert "command line" in line and "max_live_requests" in line


def test_serve_reports_a_bad_layout() -> None:
    assert main(["--openpi", "--port", "0", "--backend", "emulated",
                 "--layout", "no-such-layout"]) == 2


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_bench_openpi_smoke(tmp_path: Path) -> None:
    parser = argparse.ArgumentParser()
    bench_openpi.add_arguments(parser)
    out = tmp_path / "bench.json"
    args = parser.parse_args(["--robots", "2", "--duration", "1.5", "--warmup", "0.2",
                              "--json", str(out)])
    assert bench_openpi.run(args) == 0
    [row] = json.loads(out.read_text())["rows"]
    assert row["robots"] == 2 and row["in_process"]["n"] > 0 and row["openpi"]["n"] > 0
    assert row["openpi_paired"]["p50_ms"] > 0
