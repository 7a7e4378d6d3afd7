"""The standalone CLI's arguments and the openpi transport benchmark (smoke)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from xinfer_ros.cli import bench_openpi
from xinfer_ros.cli.serve import build_parser, main


def test_serve_requires_openpi_and_defaults_to_loopback() -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args([])
    args = build_parser().parse_args(["--openpi", "--port", "0", "--allow", "a", "b"])
    assert args.host == "127.0.0.1" and args.allow == ["a", "b"]
    # Limits not given are the endpoint's own defaults.
    from xinfer_ros.cli.serve import _config
    from xinfer_ros.openpi.server import ServerConfig

    args.layout = "libero"
    config, default = _config(args), ServerConfig()
    assert config.max_message_bytes == default.max_message_bytes == 16 * 1024 * 1024
    assert config.max_connections == default.max_connections
    assert config.default_budget_ms == default.default_budget_ms == 180.0
    args.max_connections = 3
    assert _config(args).max_connections == 3


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
