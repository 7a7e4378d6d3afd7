"""``xinfer-check-checkpoint``: what a π0 checkpoint holds and what the server will run.

Example::

    xinfer-check-checkpoint /models/pi0_my_arm               # text, one fact per line
    xinfer-check-checkpoint /models/pi0_my_arm --model my_arm.yaml --json   # for CI

It resolves the directory exactly as the server does at start-up (config, pipeline
files, statistics, tokenizer; the weights are not loaded) and prints the layout,
cameras in request order, widths, normalisation per feature, pipeline steps, the
request path's transforms, the tokenizer, chunk length, steps and dtype. A directory
the server would refuse exits with status 2 and the one line the server prints. No
ROS needed.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    """The command-line parser."""
    p = argparse.ArgumentParser(prog="xinfer-check-checkpoint",
                                description=__doc__.splitlines()[0])
    p.add_argument("directory", help="π0 checkpoint directory (transformers' or lerobot's)")
    p.add_argument("--model", default="pi0",
                   help="π0 preset the server would use: a name or YAML path (pi0)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Print the report; 0 when the server would start, 2 when it would refuse."""
    args = build_parser().parse_args(argv)
    try:
        from xinfer_ros.model.pi0.report import describe_checkpoint
    except ImportError as exc:
        print(f"error: xinfer-check-checkpoint needs the model extra and torch "
              f"(pip install 'xinfer_ros[model]' torch): {exc}", file=sys.stderr)
        return 2
    try:
        report = describe_checkpoint(args.directory, args.model)
    except (ValueError, OSError) as exc:
        # The inference server's start-up line (nodes.runtime), word for word.
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
    else:
        print("\n".join(report.lines()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
