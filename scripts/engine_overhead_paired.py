"""The engine's own cost at low load, paired against a plain ``sample_actions`` call.

One process, no transport: requests alternate between (a) transformers'
``sample_actions`` with the project's preprocessing (the peer servers' policy), (b)
the engine as ``xinfer-serve`` builds it from ``config/fleet.yaml`` (slots 1,1,2, two
Action worker processes, the fast path on), (c) the same engine with the fast path off
(every step through the dispatcher thread) and (d) the engine of (b) without Action
worker processes, one request at a time. Each engine request follows a peer request,
the engine arms in an order rotated every round; the ratio of each engine request's
time to the peer request just before it is robust to load from other work on the host,
and its median is the engine's overhead. With ``--timeline``, the steps of (b) and (c) are timed per
request (preparation, events handled, units, output, and the gaps between them).

    python scripts/engine_overhead_paired.py --requests 25 [--timeline]
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import statistics
import time
from collections.abc import Callable
from typing import Any

from xinfer_ros.cli.bench_peers import _xinfer_params, observation
from xinfer_ros.engine import batching, engine
from xinfer_ros.engine.from_params import build_engine
from xinfer_ros.model.presets import model_io
from xinfer_ros.openpi.layouts import ModelSpec, load_layout, map_observation
from xinfer_ros.openpi.peers import SampleActionsPolicy
from xinfer_ros.serving.frontend import engine_inputs

_MARKS: list[tuple[float, str]] = []


def _mark(cls: Any, name: str, tag: str) -> None:
    """Wrap ``cls.name`` so that its entry and exit are time-stamped."""
    inner = getattr(cls, name)

    def wrapped(self: Any, *args: Any, **kwargs: Any) -> Any:
        what = type(args[0]).__name__ if name == "_handle" else getattr(args[0], "name", "")
        _MARKS.append((time.perf_counter(), f"{tag}>{what}"))
        try:
            return inner(self, *args, **kwargs)
        finally:
            _MARKS.append((time.perf_counter(), f"{tag}<"))
    setattr(cls, name, wrapped)


def _submitter(eng: Any, inputs: Callable[[int], Any]) -> Callable[[int], Any]:
    """One request through ``eng``, waited for."""
    return lambda i: eng.submit(inputs(i), 0.4, "r").result()


def main() -> None:
    """Run the paired comparison and print medians and ratios."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=25)
    ap.add_argument("--timeline", action="store_true")
    args = ap.parse_args()
    if args.timeline:
        _mark(engine.StageEngine, "_prepare", "prepare")
        _mark(engine.StageEngine, "_output", "output")
        _mark(engine.StageEngine, "_handle", "event")
        _mark(batching.UnitRunner, "execute", "unit")
    p = _xinfer_params(None)
    io = model_io(p["model"], p["model_path"] or None)
    slow = build_engine(p, io)
    slow.config = dataclasses.replace(slow.config, fast_path=False)  # read at run time
    engines = {"engine": build_engine(p, io).start(), "engine_no_fast_path": slow.start(),
               "engine_no_workers": build_engine({**p, "torch.action_processes": 0},
                                                 io).start()}
    policy = SampleActionsPolicy(p["model"], p["model_path"] or None)
    spec, layout, obs = ModelSpec.from_io(io), load_layout("aloha"), observation(p, 0)

    def inputs(seed: int) -> dict[str, Any]:
        m = map_observation(obs, layout, spec)
        return engine_inputs(m.images, m.prompt, m.state, prev_chunk=None, commit=0,
                             seed=seed)

    arms: dict[str, Callable[[int], Any]] = {"sample_actions": lambda i: policy.infer(obs)}
    for name, eng in engines.items():
        arms[name] = _submitter(eng, inputs)
    for call in arms.values():
        for i in range(3):
            call(i)
    times: dict[str, list[float]] = {k: [] for k in arms}
    ratios: dict[str, list[float]] = {k: [] for k in engines}
    gaps: dict[str, list[float]] = {}
    between: dict[str, list[float]] = {}
    names = list(engines)
    for i in range(args.requests):
        for k in range(len(names)):
            name = names[(i + k) % len(names)]
            peer_ms = _timed(arms["sample_actions"], i)
            times["sample_actions"].append(peer_ms)
            _MARKS.clear()
            t0 = time.perf_counter()
            arms[name](i)
            t1 = time.perf_counter()
            times[name].append((t1 - t0) * 1e3)
            ratios[name].append(times[name][-1] / peer_ms)
            if name in ("engine", "engine_no_fast_path") and _MARKS:
                seq = [(t0, "submit"), *_MARKS, (t1, "result")]
                for (a, x), (b, y) in itertools.pairwise(seq):
                    gaps.setdefault(f"{name}: {x} -> {y}", []).append((b - a) * 1e3)
                outside = (t1 - t0) - sum(b - a for (a, x), (b, _) in itertools.pairwise(_MARKS)
                                          if x.rsplit(">", 1)[0] != x)
                between.setdefault(name, []).append(outside * 1e3)
            time.sleep(0.05)
    _print(times, ratios, gaps, args.requests)
    for name, ms in between.items():
        ms.sort()
        print(f"{name}: outside preparation, events, units and output per request: median "
              f"{statistics.median(ms):.2f} ms, P90 {ms[int(0.9 * (len(ms) - 1))]:.2f} ms, "
              f"max {ms[-1]:.2f} ms")
    for name, eng in engines.items():
        stats = eng.stats()
        print(f"{name}: fast-path steps {stats['fast_path_steps']}, units "
              f"{stats['fast_path_units']}, dispatcher decisions {stats['decisions']}")
    for eng in engines.values():
        eng.close()
        eng.backend.close()


def _timed(call: Callable[[int], Any], i: int) -> float:
    """Milliseconds ``call(i)`` took."""
    t0 = time.perf_counter()
    call(i)
    return (time.perf_counter() - t0) * 1e3


def _print(times: dict[str, list[float]], ratios: dict[str, list[float]],
           gaps: dict[str, list[float]], requests: int) -> None:
    """Medians per arm, paired ratios to ``sample_actions``, and the timeline's gaps."""
    for name, ms in times.items():
        ratio = statistics.median(ratios[name]) if name in ratios else 1.0
        print(f"{name:20} P50 {statistics.median(ms):7.1f} ms   paired ratio to "
              f"sample_actions, median {ratio:.3f}")
    for step, ms in gaps.items():
        if len(ms) >= requests // 2:
            print(f"  {statistics.median(ms):7.2f} ms  {step}")


if __name__ == "__main__":
    main()
