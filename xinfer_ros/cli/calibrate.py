"""``xinfer-calibrate``: measure a backend and write a rate-table file (App. C.1).

Example::

    xinfer-calibrate --backend torch --model tiny --out config/rate_table_cpu_tiny.json

The defaults (bounds 2,2,2; combinations of up to 4 units; one 0.5 s window each) take
about a minute for ``tiny`` on a 2-core CPU; ``--max-units``, ``--repeats`` and
``--window`` measure more. The file is the format ``xinfer_ros.core.rate_table``
reads; it is validated by reading it back.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from xinfer_ros.cli.torch_options import add_torch_arguments, make_torch_backend, stage_counts
from xinfer_ros.core.rate_monotone import monotone_rates
from xinfer_ros.core.rate_table import load_rate_table, resolve_rate_table, write_rate_table
from xinfer_ros.engine.affinity import pin_thread
from xinfer_ros.engine.backends import BACKENDS, EMULATION_NOTICE, make_backend
from xinfer_ros.engine.calibration import CalibrationSettings, calibrate

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    """The command-line parser."""
    p = argparse.ArgumentParser(prog="xinfer-calibrate", description=__doc__.splitlines()[0])
    p.add_argument("--backend", choices=BACKENDS, default="torch")
    # Calibrate with the worker processes and pinning the engine will run with.
    add_torch_arguments(p)
    p.add_argument("--rate-table", type=Path, default=None,
                   help="emulated backend: the table it emulates (default: shipped)")
    p.add_argument("--out", type=Path, required=True, help="rate-table JSON to write")
    p.add_argument("--bounds", type=stage_counts(minimum=0), default=(2, 2, 2),
                   help="lookup bounds c = other units per stage (V,P,A)")
    p.add_argument("--max-units", type=int, default=4,
                   help="largest number of concurrent units in a combination")
    p.add_argument("--window", type=float, default=0.5, help="seconds measured per combination")
    p.add_argument("--warmup", type=float, default=0.15, help="seconds discarded per combination")
    p.add_argument("--repeats", type=int, default=1, help="repetitions per combination")
    p.add_argument("--iso-repeats", type=int, default=8, help="isolated units per stage")
    p.add_argument("--reference-units", type=int, default=3,
                   help="isolated reference units per stage before each combination (0: off)")
    p.add_argument("--max-batch", type=int, default=1, metavar="N",
                   help="calibrate for an engine that runs up to N units of a stage as one "
                        "batch (its max_batch; default 1)")
    p.add_argument("--batch-factors", action="store_true",
                   help="with --max-batch N: measure the combinations one unit per lane "
                        "(the cells unbatched serving reads) and each stage's batch of "
                        "k <= N alone against one unit alone, instead of splitting each "
                        "combination's units into batches (xinfer_ros.core.batch_cost)")
    p.add_argument("--monotone", action="store_true",
                   help="make each stage's rates non-increasing in every count of other "
                        "units (xinfer_ros.core.rate_monotone): short windows on a shared "
                        "CPU can measure a busier state as faster; the table's provenance "
                        "says how many rates moved")
    p.add_argument("--json-summary", type=Path, default=None,
                   help="also write the raw measurements here")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Run the calibration; returns the exit status."""
    args = build_parser().parse_args(argv)
    if args.batch_factors and args.max_batch < 2:
        raise SystemExit("xinfer-calibrate: --batch-factors needs --max-batch N with N >= 2")
    if args.backend == "emulated":
        table = resolve_rate_table(args.rate_table)
        backend = make_backend("emulated", table=table)
        describe = f"{EMULATION_NOTICE} (calibrating the emulator itself)"
        print(describe)
    else:
        # Lanes started from here inherit the pinned CPUs.
        pin_thread(args.main_cpus)
        backend = make_torch_backend(args)
        info = backend.describe()
        describe = (f"model={info.get('model')} device={info.get('device')} "
                    f"dtype={info.get('dtype')} threads/lane={info.get('threads_per_lane')} "
                    f"gpu={info.get('gpu', '-')} action_processes={info.get('action_processes')} "
                    f"main_cpus={info.get('main_cpus')} action_cpus={info.get('action_cpus')} "
                    f"compile={info.get('compile')}")
    settings = CalibrationSettings(bounds=args.bounds, max_units=args.max_units,
                                   window_s=args.window, warmup_s=args.warmup,
                                   repeats=args.repeats, iso_repeats=args.iso_repeats,
                                   reference_units=args.reference_units,
                                   max_batch=args.max_batch,
                                   batch_factors=args.batch_factors)
    prefix = f"{EMULATION_NOTICE} " if backend.emulated else ""
    result = calibrate(backend, settings, describe=describe,
                       progress=lambda line: print(prefix + line, flush=True))
    backend.close()
    t = result.table
    if args.monotone:
        t, moved = monotone_rates(t)
        print(f"{prefix}--monotone: {moved} measured rate(s) moved to respect the order")
    path = write_rate_table(t, args.out)
    load_rate_table(path)
    print(f"{prefix}wrote {path} in {result.elapsed_s:.1f} s: W_ms="
          f"{[round(w * 1e3, 3) for w in t.work]} h_ms={[round(h * 1e3, 3) for h in t.overhead]} "
          f"h_out_ms={t.h_out * 1e3:.3f} bounds={list(t.bounds)}")
    if args.json_summary is not None:
        args.json_summary.write_text(json.dumps({
            "isolated_ms": result.isolated_ms,
            "measured_ms": {",".join(map(str, n)): row for n, row in result.measured.items()},
            "elapsed_s": result.elapsed_s, "table": str(path)}, indent=1) + "\n",
            encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
