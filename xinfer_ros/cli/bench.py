"""``xinfer-bench``: one entry point for the project's benchmarks.

Each benchmark lives in its own module ``xinfer_ros.cli.bench_<name>`` that defines
``add_arguments(parser)`` and ``run(args) -> int``. Modules are imported only when
their sub-command runs, so ``xinfer-bench decision`` never imports torch.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from types import ModuleType

from xinfer_ros.core.errors import RateTableError

__all__ = ["BENCHMARKS", "build_parser", "main"]

#: Sub-command name -> one-line help. The module is ``xinfer_ros.cli.bench_<name>``.
BENCHMARKS: dict[str, str] = {
    "decision": "scheduler decision cost (policy update + admission check)",
    "model": "per-stage latency, FLOPs and π0 parity of a served model",
    "engine": "closed-loop engine benchmark (async / serial / lockstep)",
    "transport": "latency the ROS path adds over the in-process engine",
    "openpi": "latency the openpi WebSocket path adds over the in-process engine",
    "peers": "xinfer side by side with openpi- and LeRobot-style serial servers",
    "compare": "engine runs' arms compared at one host speed (speed-probe covariate)",
}


def _load(name: str) -> ModuleType:
    return importlib.import_module(f"xinfer_ros.cli.bench_{name}")


def build_parser(argv: Sequence[str]) -> argparse.ArgumentParser:
    """Build the parser, importing only the module of the sub-command in ``argv``."""
    parser = argparse.ArgumentParser(prog="xinfer-bench", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="benchmark", required=True, metavar="BENCHMARK")
    chosen = next((a for a in argv if not a.startswith("-")), None)
    for name, text in BENCHMARKS.items():
        sub_parser = sub.add_parser(name, help=text, description=text)
        if name == chosen:
            _load(name).add_arguments(sub_parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one benchmark and return its exit status."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    args = build_parser(args_list).parse_args(args_list)
    try:
        return int(_load(args.benchmark).run(args))
    except RateTableError as exc:  # a --rate-table we cannot read: one line, no traceback
        raise SystemExit(f"error: {exc}") from None


if __name__ == "__main__":
    sys.exit(main())
