"""How long the first batched Action unit of a compiled server takes, warmed or not.

From the repository root, with nothing else running::

    .venv/bin/python docs/data/cpu-2026-12-06-compile/stall.py --max-batch 1 --cold
    .venv/bin/python docs/data/cpu-2026-12-06-compile/stall.py --max-batch 4 --cold

Builds the torch backend (``pi0-tiny``, compile ``on``, Action in this process unless
``--action-processes N``) with that ``max_batch``: 1 compiles a batch of one before
serving, as every backend did before 2026-12-06 whatever the engine's ``max_batch``. It
then runs guided Action batches of 1, 2, 3 and 4 units, twice (lone units: in this
process), and prints every unit's seconds. ``--cold`` gives the compiler
a fresh cache directory (a first start on a machine); without it the default directory's
cache is used.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time


def _units(max_batch: int, action_processes: int) -> None:
    from xinfer_ros.core.stages import Stage
    from xinfer_ros.engine import make_backend

    t0 = time.perf_counter()
    backend = make_backend("torch", model="pi0-tiny", device="cpu", threads=1, compile="on",
                           max_batch=max_batch, action_processes=action_processes)
    print(f"max_batch {max_batch}: built in {time.perf_counter() - t0:.1f} s "
          f"(compile_s {backend.compile_s:.1f})", flush=True)
    fresh = backend.state_factory()
    for rnd in (1, 2):
        for size in (1, 2, 3, 4):
            states = [fresh(Stage.ACTION) for _ in range(size)]
            t0 = time.perf_counter()
            backend.run_batch(Stage.ACTION, states, None)
            print(f"  round {rnd} batch {size}: {time.perf_counter() - t0:.3f} s", flush=True)
    backend.close()


def main() -> None:
    """One build and its units."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-batch", type=int, required=True)
    parser.add_argument("--cold", action="store_true", help="a fresh compiler cache")
    parser.add_argument("--action-processes", type=int, default=0,
                        help="Action worker processes (lone units still run here)")
    args = parser.parse_args()
    if args.cold:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="inductor-")
    _units(args.max_batch, args.action_processes)


if __name__ == "__main__":
    main()
