"""xinfer-bench engine with the dispatcher's parts timed and the queue waits split.

Wraps engine and policy methods with wall-clock timers (perf_counter, so a call's time
includes any wait for the GIL while lane threads run Python) and records, per launched
unit, how long it waited in the policy's ready queue and then for a lane. At exit it
writes {name: [calls, mean µs]} and the waits' mean/p50/p90 (ms) to $TIMERS as JSON.
OFF=1 moves the saturation band out of reach first, as ../../cpu-2026-12-06-interleave/
off_pairs/sw_off.py does. Each timer adds a call and two clock reads, alike in both arms.

    TIMERS=unb.json python timed_bench.py engine ... --policy xinfer --slots 1,1,2
    OFF=1 TIMERS=off.json python timed_bench.py engine ... --policy xinfer_batch_switch
        --slots 4,4,8 --max-batch 4   (one command line)
"""
import atexit
import json
import os
import sys
import time

import numpy as np

_timers: dict[str, list[float]] = {}
_waits: dict[str, list[float]] = {}


def _timed(owner, name, label):
    inner = getattr(owner, name)
    acc = _timers.setdefault(label, [0, 0.0])

    def wrapper(*args, **kwargs):
        t0 = time.perf_counter()
        try:
            return inner(*args, **kwargs)
        finally:
            acc[0] += 1
            acc[1] += time.perf_counter() - t0

    setattr(owner, name, wrapper)


def _install():
    from xinfer_ros.core import policy, prediction_audit, xinfer_policy
    from xinfer_ros.engine import batching, engine

    eng = engine.StageEngine
    issue, on_unit = eng._issue, eng._on_unit

    def record_issue(self, launch, now, opening, **kw):
        live = launch.request.payload
        _waits.setdefault(f"ready_{int(launch.stage)}", []).append((now - live.ready_since) * 1e3)
        return issue(self, launch, now, opening, **kw)

    def record_unit(self, done):
        if done.issued <= done.t0:
            _waits.setdefault(f"lane_{int(done.stage)}", []).append((done.t0 - done.issued) * 1e3)
        return on_unit(self, done)

    eng._issue, eng._on_unit = record_issue, record_unit
    for name in ("_decide", "_launch_all", "_shed_expired", "_issue", "_start_unit",
                 "_needs_tick"):
        _timed(eng, name, f"StageEngine.{name}")
    _timed(policy.Policy, "schedule", "Policy.schedule")
    for name in ("_dispatch", "_refresh", "_stage_limit", "observe_forward", "spreads_lanes",
                 "at_own_limit", "add_request", "complete"):
        _timed(xinfer_policy.XInferPolicy, name, f"XInferPolicy.{name}")
    _timed(batching, "_batch_key", "batching._batch_key")
    _timed(batching.BatchQueue, "put", "BatchQueue.put")
    _timed(batching.BatchQueue, "take", "BatchQueue.take")
    _timed(prediction_audit.PredictionAudit, "maybe_sample", "PredictionAudit.maybe_sample")


def _dump():
    def stats(values):
        a = np.asarray(values)
        return {"n": len(a), "mean": float(a.mean()), "p50": float(np.median(a)),
                "p90": float(np.percentile(a, 90))}
    out = {"timers_us": {k: [int(n), s / n * 1e6 if n else 0.0]
                         for k, (n, s) in sorted(_timers.items())},
           "waits_ms": {k: stats(v) for k, v in sorted(_waits.items()) if v}}
    with open(os.environ["TIMERS"], "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    if os.environ.get("OFF") == "1":
        from xinfer_ros.core import saturation
        # The band of sw_off.py (enter 50, leave 49); window and dwell stay the shipped ones.
        window, _, _, dwell = saturation.SaturationSettings.__init__.__defaults__
        saturation.SaturationSettings.__init__.__defaults__ = (window, 50.0, 49.0, dwell)
    _install()
    atexit.register(_dump)
    from xinfer_ros.cli.bench import main
    sys.exit(main())
