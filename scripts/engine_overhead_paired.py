"""The engine's own cost at low load, paired against a plain ``sample_actions`` call.

One process, no transport: requests alternate between (a) transformers'
``sample_actions`` with the project's preprocessing (the peer servers' policy), (b)
the engine as ``xinfer-serve`` builds it from ``config/fleet.yaml`` (slots 1,1,2, two
Action worker processes) and (c) the same engine without Action worker processes, one
request at a time. The ratio of each request's time to the peer request just before it
is robust to load from other work on the host; its median is the engine's overhead.
With ``--timeline``, (b)'s hand-offs between threads are timed per request.

    python scripts/engine_overhead_paired.py --requests 25 [--timeline]
"""

from __future__ import annotations

import argparse
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
        what = args[0][0] if name == "_handle" else getattr(args[0], "name", "")
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
        _mark(engine.StageEngine, "_prepare_task", "prepare")
        _mark(engine.StageEngine, "_output_task", "output")
        _mark(engine.StageEngine, "_handle", "event")
        _mark(batching.UnitRunner, "run", "unit")
    p = _xinfer_params(None)
    io = model_io(p["model"], p["model_path"] or None)
    engines = {"engine": build_engine(p, io).start(),
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
    gaps: dict[str, list[float]] = {}
    for i in range(args.requests):
        for name, call in arms.items():
            _MARKS.clear()
            t0 = time.perf_counter()
            call(i)
            t1 = time.perf_counter()
            times[name].append((t1 - t0) * 1e3)
            if name == "engine" and _MARKS:
                seq = [(t0, "submit"), *_MARKS, (t1, "result")]
                for (a, x), (b, y) in itertools.pairwise(seq):
                    gaps.setdefault(f"{x} -> {y}", []).append((b - a) * 1e3)
            time.sleep(0.05)
    for name in arms:
        ratio = [a / b for a, b in zip(times[name], times["sample_actions"], strict=True)]
        print(f"{name:18} P50 {statistics.median(times[name]):7.1f} ms   paired ratio to "
              f"sample_actions, median {statistics.median(ratio):.3f}")
    for step, ms in gaps.items():
        if len(ms) >= args.requests // 2:
            print(f"  {statistics.median(ms):7.2f} ms  {step}")
    for eng in engines.values():
        eng.close()
        eng.backend.close()


if __name__ == "__main__":
    main()
