"""``xinfer-bench peers``: the peer serving loops, the block figures, and a smoke run."""

from __future__ import annotations

import asyncio
import json
import math
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from xinfer_ros.cli import bench_peers
from xinfer_ros.cli.bench import main as bench_main
from xinfer_ros.core.metrics import ResponseRecord
from xinfer_ros.openpi.client import OpenPIClient, ServerError


def _rec(send: float, latency: float, budget_ms: float, ok: bool = True) -> ResponseRecord:
    return ResponseRecord(send, send + latency, budget_ms / 1000.0, ok)


def test_block_figures_count_refusals_in_the_latency_a_robot_sees() -> None:
    # Chunks in 50 ms, and refusals after 300 ms: the chunk-only P99 hides the wait.
    records = [_rec(1.0 + i * 0.2, 0.05, 150.0 if i % 2 else 400.0) for i in range(20)]
    records += [_rec(10.0 + i * 0.2, 0.30, 150.0, ok=False) for i in range(5)]
    records += [_rec(0.1, 0.05, 150.0)]  # in the warm-up: not counted
    result = bench_peers.BlockResult(records=records)
    figures = bench_peers.block_metrics(result, warmup=0.5, duration=20.0,
                                        budgets_ms=[150.0, 400.0])
    tight, wide, every = figures["150"], figures["400"], figures["all"]
    assert tight["requests"] == 15 and wide["requests"] == 10 and every["requests"] == 25
    assert tight["refused"] == 5 and wide["refused"] == 0
    assert tight["attainment"] == pytest.approx(10 / 15) and wide["attainment"] == 1.0
    assert tight["chunk_p99_ms"] == pytest.approx(50.0)
    assert tight["p99_ms"] == pytest.approx(300.0)
    assert every["on_time_s"] == pytest.approx(20 / 19.5)


def test_aggregate_takes_the_median_of_rounds() -> None:
    rounds = [{"all": {"attainment": a, "p50_ms": p}} for a, p in
              ((0.9, 80.0), (0.5, 200.0), (0.8, math.nan))]
    table = bench_peers.aggregate({("openpi", 2): rounds})
    assert table["openpi"][2]["all"]["attainment"] == pytest.approx(0.8)
    assert table["openpi"][2]["all"]["p50_ms"] == pytest.approx(140.0)


def test_bench_peers_refuses_a_window_it_cannot_measure(capsys: pytest.CaptureFixture[str]
                                                        ) -> None:
    # Checked before any server starts: one line, exit 2.
    assert bench_main(["peers", "--duration", "1", "--warmup", "2"]) == 2
    assert "--duration > --warmup" in capsys.readouterr().err


@pytest.mark.parametrize(("arm", "changed"), [
    ("xinfer-serial", {"torch.slots": [1, 1, 1], "torch.action_processes": 0}),
    ("xinfer-lazy", {"torch.lazy_slots": "stage"}),
    ("xinfer-lazy-device", {"torch.lazy_slots": "device"}),
])
def test_variant_arms_run_the_shipped_file_with_their_torch_changes(
        tmp_path: Path, arm: str, changed: dict[str, object]) -> None:
    from xinfer_ros.cli.serve import build_parser, server_params

    path = bench_peers.arm_params_file(arm, None, tmp_path)
    p = server_params(build_parser().parse_args(["--openpi", "--params-file", path]))
    shipped = server_params(build_parser().parse_args(["--openpi"]))
    assert shipped["torch.lazy_slots"] == "off"
    assert {k: p[k] for k in changed} == changed
    assert {k: v for k, v in p.items() if k not in changed} == \
        {k: v for k, v in shipped.items() if k not in changed}


@pytest.fixture(scope="module")
def policy() -> Any:
    pytest.importorskip("transformers")
    from xinfer_ros.openpi.peers import SampleActionsPolicy

    return SampleActionsPolicy("pi0-tiny")


def _serve(server: Any) -> tuple[int, Any]:
    """Run a peer server on a thread; return its port and a stopper."""
    ready = threading.Event()
    state: dict[str, Any] = {}

    async def main() -> None:
        state["stop"] = asyncio.Event()
        state["loop"] = asyncio.get_running_loop()

        def bound(port: int) -> None:
            state["port"] = port
            ready.set()
        await server.serve(bound, state["stop"])

    thread = threading.Thread(target=asyncio.run, args=(main(),), daemon=True)
    thread.start()
    assert ready.wait(30)

    def stop() -> None:
        state["loop"].call_soon_threadsafe(state["stop"].set)
        thread.join(10)
    return state["port"], stop


@pytest.mark.torch
@pytest.mark.slow
def test_openpi_style_peer_serves_the_chunk_of_the_xinfer_model(policy: Any) -> None:
    from xinfer_ros.cli.serve import build_parser, server_params
    from xinfer_ros.engine.from_params import build_engine
    from xinfer_ros.model.presets import model_io
    from xinfer_ros.openpi.peers import OpenPIStyleServer
    from xinfer_ros.openpi.server import OpenPIServer, ServerConfig, ServerThread

    params = {**server_params(build_parser().parse_args(["--openpi"])),
              "torch.action_processes": 0}
    obs = {**bench_peers.observation(params, 0), "xinfer/budget_ms": 400.0}
    port, stop = _serve(OpenPIStyleServer(policy))
    try:
        with OpenPIClient(f"ws://127.0.0.1:{port}/a") as client:
            peer = client.infer(obs)
    finally:
        stop()
    engine = build_engine(params, model_io(params["model"])).start()
    try:
        from xinfer_ros.openpi.layouts import ModelSpec, load_layout

        server = OpenPIServer(engine, ModelSpec.from_io(engine.backend.io),
                              ServerConfig(port=0, layout=load_layout("aloha")))
        with ServerThread(server) as thread, \
                OpenPIClient(f"ws://127.0.0.1:{thread.port}/b") as client:
            ours = client.infer(obs)
    finally:
        engine.close()
        engine.backend.close()
    # Same preprocessing, same weights, same seed (the first request of each): the
    # stage split and sample_actions agree to float rounding.
    assert peer["actions"].shape == ours["actions"].shape == (50, 14)
    assert np.max(np.abs(peer["actions"] - ours["actions"])) < 1e-4
    assert peer["server_timing"]["infer_ms"] > 0


@pytest.mark.torch
@pytest.mark.slow
def test_lerobot_style_peer_refuses_a_superseded_observation(policy: Any) -> None:
    from xinfer_ros.openpi.peers import LeRobotStyleServer

    server = LeRobotStyleServer(policy)
    port, stop = _serve(server)
    obs = bench_peers.observation({"model": "pi0-tiny", "model_path": ""}, 0)
    outcomes: list[str] = []
    lock = threading.Lock()

    def robot(i: int) -> None:
        with OpenPIClient(f"ws://127.0.0.1:{port}/r{i}") as client:
            for _ in range(3):
                try:
                    client.infer(obs)
                    kind = "ok"
                except ServerError as exc:
                    kind = str(exc).split(":", 1)[0]
                with lock:
                    outcomes.append(kind)
    try:
        threads = [threading.Thread(target=robot, args=(i,)) for i in range(4)]
        for th in threads:
            th.start()
        for th in threads:
            th.join(120)
    finally:
        stop()
    # Four robots, one slot: every observation is answered, some by a refusal.
    assert len(outcomes) == 12
    assert set(outcomes) <= {"ok", "superseded"} and "ok" in outcomes
    assert "superseded" in outcomes


@pytest.mark.torch
@pytest.mark.slow
@pytest.mark.extended
def test_bench_peers_smoke_runs_every_arm(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    out, figure = tmp_path / "peers.json", tmp_path / "peers.png"
    rc = bench_main(["peers", "--robots", "1", "--rounds", "1", "--duration", "2.0",
                     "--warmup", "0.3", "--paired", "3", "--json", str(out),
                     "--figure", str(figure)])
    assert rc == 0
    data = json.loads(out.read_text())
    assert set(data["table"]) == {"openpi", "lerobot", "xinfer"}
    for arm in data["table"].values():
        figures = arm["1"]
        assert figures["all"]["requests"] >= 1
        assert 0.0 <= figures["all"]["attainment"] <= 1.0
        assert set(figures) == {"all", "150", "400"}
    assert figure.stat().st_size > 10_000
    printed = capsys.readouterr().out
    assert "median of 1 interleaved round" in printed and "xinfer" in printed
    paired = data["paired"]
    assert [len(v) for v in paired["latency_ms"].values()] == [3, 3, 3]
    assert paired["table"]["openpi"]["ratio_median"] == 1.0
    assert all(row["p50_ms"] > 0 for row in paired["table"].values())
    assert "3 paired rounds" in printed


def test_paired_ratios_are_taken_round_by_round_against_the_first_arm() -> None:
    # The machine slows in round 2 for both arms: the per-round ratio cancels it, where
    # the ratio of medians would not.
    table = bench_peers.paired_table({"openpi": [60.0, 120.0, 62.0],
                                      "xinfer": [63.0, 126.0, 65.1]})
    assert table["openpi"]["ratio_median"] == 1.0
    assert table["xinfer"]["ratio_median"] == pytest.approx(1.05)
    assert table["xinfer"]["p50_ms"] == 65.1
