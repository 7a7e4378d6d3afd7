#!/usr/bin/env python3
"""Generate a small sample fleet bag: a few seconds of 1-2 simulated robots.

Nothing is downloaded: it starts a fleet (server with a deterministic torch model on
CPU, ``pi0-tiny`` by default, an RTC executor and a simulated robot per robot) and
records it with ``xinfer-record --with-fleet``. The bag is generated rather than shipped: the server
checks camera sizes, so real-size frames make even a short bag tens of MB.

    ./env.sh python scripts/make_sample_bag.py out/bags/sample --robots 1 --duration 4
    ./env.sh xinfer-replay out/bags/sample --require-identical
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

__all__ = ["main", "make_sample_bag"]


def make_sample_bag(output: Path, *, robots: int = 1, duration: float = 4.0,
                    backend: str = "torch", storage: str = "mcap",
                    logs: Path | None = None, model: str = "pi0-tiny") -> int:
    """Record a short fleet run into ``output``; return ``xinfer-record``'s status.

    Args:
        output: Bag directory to create (must not exist).
        robots: Simulated robots (1-2 keep it small).
        duration: Seconds recorded once the server is up.
        backend: ``torch`` (deterministic weights) or ``emulated``.
        storage: ``mcap`` or ``sqlite3``.
        logs: Directory for the fleet's node logs (default: a temp dir).
        model: Model preset of the server (π0's ``pi0-tiny``, or the reference ``tiny``).
    """
    from xinfer_ros.cli.record import main as record

    argv = ["--with-fleet", "--robots", str(robots), "--duration", str(duration),
            "--backend", backend, "--model", model, "--storage", storage,
            "--output", str(output)]
    if logs is not None:
        argv += ["--logs", str(logs)]
    return record(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Command line of the script."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("output", type=Path, help="bag directory to create")
    p.add_argument("--robots", type=int, default=1, choices=(1, 2))
    p.add_argument("--duration", type=float, default=4.0, help="seconds recorded")
    p.add_argument("--backend", choices=("torch", "emulated"), default="torch")
    p.add_argument("--storage", choices=("mcap", "sqlite3"), default="mcap")
    p.add_argument("--logs", type=Path, default=None, help="fleet node logs")
    p.add_argument("--model", default="pi0-tiny", help="model preset of the server")
    args = p.parse_args(argv)
    return make_sample_bag(args.output, robots=args.robots, duration=args.duration,
                           backend=args.backend, storage=args.storage, logs=args.logs,
                           model=args.model)


if __name__ == "__main__":
    sys.exit(main())
