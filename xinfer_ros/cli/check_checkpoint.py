"""``xinfer-check-checkpoint``: what a π0 checkpoint holds and what the server will run.

Example::

    xinfer-check-checkpoint /models/pi0_my_arm               # text, one fact per line
    xinfer-check-checkpoint /models/pi0_my_arm --model my_arm.yaml --json   # for CI
    xinfer-check-checkpoint /models/pi0_aloha --layout pi0_aloha   # served over openpi

It resolves the directory exactly as the server does at start-up (config, pipeline
files, statistics, tokenizer; the weights are not loaded) and prints the layout,
cameras in request order, widths, normalisation per feature, pipeline steps, the
request path's transforms, the tokenizer, chunk length, steps and dtype; with
``--layout``, also the openpi layout's data transforms the openpi endpoint runs around
the model (ALOHA's joint flips, the delta-action mask, prompt cleaning, resampling). A
directory or layout the server would refuse exits with status 2 and the one line the
server prints. No ROS needed.
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
    p.add_argument("--layout", default=None,
                   help="openpi observation layout the checkpoint is served behind (a name "
                        "such as pi0_aloha or pi0_libero, or a YAML/JSON file): report its "
                        "data transforms too")
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
        layout = _layout(args.layout) if args.layout else None
    except (ValueError, OSError) as exc:
        # The inference server's start-up line (nodes.runtime), word for word.
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps({**report.to_dict(), **({"openpi": layout} if layout else {})},
                         indent=2))
    else:
        print("\n".join(report.lines()))
        if layout:
            print("\n".join(f"openpi {key}: {value}" for key, value in layout.items()))
    return 0


def _layout(name_or_path: str) -> dict[str, object]:
    """What the openpi endpoint runs around the model for the layout ``name_or_path``.

    Raises:
        ValueError: On an unknown layout or a malformed layout file (the endpoint's
            one line).
    """
    from xinfer_ros.openpi.layouts import load_layout

    layout = load_layout(name_or_path)
    if layout is None:
        raise ValueError("--layout auto picks a layout per observation: name the layout "
                         "the checkpoint was trained behind")
    transforms = layout.transforms
    return {
        "layout": layout.name,
        "cameras": [c.key for c in layout.cameras],
        "state_key": layout.state_key,
        "reply_action_dim": layout.action_dim,
        "adapt_to_pi": transforms.adapt_to_pi if transforms else False,
        "delta_action_mask": list(transforms.delta_action_mask) if transforms else [],
        "clean_prompt": transforms.clean_prompt if transforms else False,
        "resize": layout.resize,
        "resample": layout.resample,
    }


if __name__ == "__main__":
    sys.exit(main())
