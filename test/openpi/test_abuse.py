"""Abusive clients against an ``xinfer-serve --openpi`` process (emulated backend, loopback).

What a hostile message or connection may cost the server: its RSS grows by at most
2x the message bytes plus 100 MiB; a valid client keeps its P99 under 2x its unloaded
P99 (median over side-by-side pairs of blocks) while amplification payloads, idle and
slow connections and a garbage flood hit the endpoint; every abusive client gets a
reason.
"""

from __future__ import annotations

import importlib.util
import json
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from xinfer_ros.openpi.client import OpenPIClient

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

SCRIPT = Path(__file__).with_name("abuse_client_script.py")
_SPEC = importlib.util.spec_from_file_location("abuse_client_script", SCRIPT)
assert _SPEC is not None and _SPEC.loader is not None
ABUSE = importlib.util.module_from_spec(_SPEC)
sys.modules[_SPEC.name] = ABUSE          # dataclasses look their module up
_SPEC.loader.exec_module(ABUSE)

MIB = 1 << 20
MAX_MESSAGE = 16 * MIB          # the endpoint's default size bound
#: Reasons an abusive message may be answered with (first word of the text frame).
REASONS = {"message_limit", "invalid_message", "invalid_observation", "rate_limited"}
VALID = {"observation/image": np.zeros((224, 224, 3), np.uint8),
         "observation/wrist_image": np.zeros((224, 224, 3), np.uint8),
         "observation/state": np.zeros(8), "prompt": "stack the blocks",
         # latency, not shedding, is measured: a budget no CPU contention exhausts
         "xinfer/budget_ms": 2000.0}


@dataclass
class Served:
    """The server process, its port, and its memory as /proc reports it."""

    proc: subprocess.Popen[str]
    port: int

    def _status(self, key: str) -> float:
        text = Path(f"/proc/{self.proc.pid}/status").read_text()
        match = re.search(rf"^{key}:\s+(\d+) kB", text, re.MULTILINE)
        assert match is not None, text
        return int(match.group(1)) / 1024

    def rss_mib(self) -> float:
        return self._status("VmRSS")

    def peak_mib(self) -> float:
        return self._status("VmHWM")

    def reset_peak(self) -> None:
        """Restart the high-water mark at the current RSS (Linux: clear_refs 5)."""
        Path(f"/proc/{self.proc.pid}/clear_refs").write_text("5")

    @property
    def uri(self) -> str:
        return f"ws://127.0.0.1:{self.port}"


@pytest.fixture(scope="module")
def served() -> Iterator[Served]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "xinfer_ros.cli.serve", "--openpi", "--backend", "emulated",
         "--port", "0", "--idle-timeout-s", "3", "--log-level", "WARNING"],
        stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        match = re.search(r"ws://127\.0\.0\.1:(\d+)", line)
        assert match is not None, line
        yield Served(proc, int(match.group(1)))
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@settings(max_examples=24, deadline=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
@given(kind=st.sampled_from(sorted(ABUSE.PAYLOADS)),
       size=st.sampled_from([4 * 1024, 256 * 1024, 4 * MIB, MAX_MESSAGE - 64]))
def test_amplification_payloads_cost_at_most_twice_their_bytes(served: Served, kind: str,
                                                               size: int) -> None:
    payload = ABUSE.PAYLOADS[kind](size)
    assert len(payload) <= MAX_MESSAGE
    before = served.rss_mib()
    served.reset_peak()
    started = time.monotonic()
    reason = ABUSE.send_and_expect_reason(served.uri, payload)
    took = time.monotonic() - started
    growth = served.peak_mib() - before
    print(f"{kind} {len(payload)} B: {reason}, RSS {before:.0f} MiB + {growth:.0f} MiB peak, "
          f"{took * 1e3:.0f} ms")
    assert reason in REASONS
    assert growth <= 2 * len(payload) / MIB + 100, (kind, len(payload), growth)
    assert took < 5.0


# -- a valid client under load ---------------------------------------------------------------
@pytest.mark.extended
def test_a_valid_client_keeps_its_p99_while_others_abuse_the_endpoint(served: Served) -> None:
    """Abuse on and off in alternating blocks (SIGSTOP/SIGCONT of the abusers' process),
    so that the load other processes put on a shared machine falls on both figures."""
    # 4 MiB amplifiers (the size of the reported attack): 16 MiB ones are refused as
    # cheaply (see above), but receiving 16 MiB at all stalls the event loop for tens
    # of ms in the WebSocket layer, whatever the message holds; rate_limit_mib_s and
    # max_message_bytes bound that, not the decoder.
    big = 4 * MIB
    config = {"uri": served.uri, "seconds": 3600.0, "idle": 20, "slow": 4, "flood": True,
              "amplify": [[["grouped_empty_maps", big], ["one_entry_maps", big],
                           ["deep", big]],
                          [[kind, 64 * 1024] for kind in sorted(ABUSE.PAYLOADS)]]}
    before = served.rss_mib()
    served.reset_peak()
    abusers = subprocess.Popen([sys.executable, str(SCRIPT), json.dumps(config)],
                               stdout=subprocess.PIPE, text=True)
    latency: dict[bool, list[float]] = {False: [], True: []}
    blocks: list[list[float]] = []  # each block's latencies, unloaded and loaded in turn
    try:
        assert abusers.stdout is not None and abusers.stdout.readline().strip() == "started"
        abusers.send_signal(signal.SIGSTOP)
        with OpenPIClient(served.uri) as client:
            for _ in range(10):                                   # warm-up
                client.infer(VALID)
            for block in range(20):
                loaded = block % 2 == 1
                abusers.send_signal(signal.SIGCONT if loaded else signal.SIGSTOP)
                time.sleep(0.3)
                blocks.append([])
                for i in range(20):
                    start = time.perf_counter()
                    client.infer(VALID)
                    latency[loaded].append((time.perf_counter() - start) * 1e3)
                    blocks[-1].append(latency[loaded][-1])
                    if latency[loaded][-1] > 150:
                        print(f"slow request: block {block} #{i} {latency[loaded][-1]:.0f} ms")
        abusers.send_signal(signal.SIGCONT)
        abusers.send_signal(signal.SIGTERM)   # the script reports on SIGTERM
        out, _ = abusers.communicate(timeout=120)
    finally:
        abusers.kill()
    reasons: dict[str, list[str]] = json.loads(out.strip().splitlines()[-1])
    growth = served.peak_mib() - before
    unloaded, loaded_p99 = (float(np.percentile(latency[k], 99)) for k in (False, True))
    in_flight = big + 64 * 1024                              # one message per amplifier
    print(f"valid client P99 unloaded {unloaded:.1f} ms, loaded {loaded_p99:.1f} ms (P50 "
          f"{np.median(latency[False]):.1f} / {np.median(latency[True]):.1f} ms); server RSS "
          f"{before:.0f} MiB + {growth:.0f} MiB peak under load; abusers answered "
          f"{sum(map(len, reasons.values()))} times")
    # The claim, judged as the benchmarks judge it: the median over the 10 side-by-side
    # pairs of blocks (unloaded, then loaded) of the ratio of their P99s. A co-tenant's
    # burst during one block moves one pair, not the verdict; a server the abuse slows
    # moves every pair.
    ratios = [float(np.percentile(loaded_block, 99) / np.percentile(unloaded_block, 99))
              for unloaded_block, loaded_block in zip(blocks[::2], blocks[1::2], strict=True)]
    print(f"P99 ratio loaded/unloaded per pair of blocks: {np.round(ratios, 2).tolist()}")
    assert float(np.median(ratios)) < 2.0, (unloaded, loaded_p99, ratios)
    assert growth <= 2 * in_flight / MIB + 100, growth
    assert len(reasons) == 2 + 1 + 20 + 4
    for name, got in reasons.items():
        assert got, f"{name} got no reason"
        # A trickler is cut off mid-frame with the idle_timeout reason, in the text frame
        # or, when the abusers were stopped past the server's close timeout, in the close
        # frame (websockets' client drops the text frame then; it showed "<OSError>"
        # once in 7 runs before the actors read the close frame's reason).
        # Any abuser stopped (SIGSTOP) for longer than the idle timeout before its next
        # message is, to the server, idle, and told so.
        expected = {"idle": set(), "slow": set(),
                    "flooder": {"invalid_message", "rate_limited"}}.get(
            name.split("_")[0], REASONS) | {"idle_timeout"}
        assert set(got) <= expected, (name, got)
    # Whether the flooder passes 100 messages/s depends on this machine's load (each
    # garbage message waits for its reply); the limit itself is tested exactly in
    # test_limits.py::test_a_flood_is_refused_and_then_held_to_the_rate.
    print(f"flooder: {reasons['flooder'].count('rate_limited')} of "
          f"{len(reasons['flooder'])} refusals rate_limited")


def test_the_server_still_serves_after_the_abuse(served: Served) -> None:
    with OpenPIClient(served.uri) as client:
        assert client.infer(VALID)["actions"].shape == (50, 7)    # pi0-tiny, LIBERO
    print(f"server RSS after the abuse: {served.rss_mib():.0f} MiB")
