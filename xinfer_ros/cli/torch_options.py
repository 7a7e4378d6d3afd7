"""Options of the torch backend, shared by ``xinfer-bench engine`` and ``xinfer-calibrate``.

A table is only as good as its match with the engine that reads it, so both tools
take the same model, device, worker-process and CPU-pinning options and build the
backend the same way.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from xinfer_ros.engine.affinity import cpu_list
from xinfer_ros.engine.backends import Backend, make_backend
from xinfer_ros.model.presets import COMPILE_MODES

__all__ = ["add_torch_arguments", "make_torch_backend", "stage_counts"]


def stage_counts(minimum: int | None = None) -> Callable[[str], tuple[int, int, int]]:
    """An argparse type for ``V,P,A`` counts, each at least ``minimum`` when given."""
    floor = "" if minimum is None else f" >= {minimum}"

    def parse(text: str) -> tuple[int, int, int]:
        try:
            parts = [int(x) for x in text.replace(" ", "").split(",")]
        except ValueError:
            parts = []
        if len(parts) != 3 or (minimum is not None and min(parts) < minimum):
            raise argparse.ArgumentTypeError(f"expected V,P,A counts{floor}, got {text!r}")
        return (parts[0], parts[1], parts[2])

    return parse


def add_torch_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the model, device, thread, Action-process and CPU-pinning options."""
    parser.add_argument("--model", default="pi0-tiny",
                        help="model preset or YAML path (torch backend; pi0-tiny)")
    parser.add_argument("--model-path", default=None, metavar="DIR",
                        help="checkpoint directory (π0: transformers' or lerobot's layout)")
    parser.add_argument("--device", default="cpu", help="torch device: cpu, cuda, cuda:N")
    parser.add_argument("--dtype", default=None, help="parameter dtype (preset default)")
    parser.add_argument("--threads", type=int, default=1, help="intra-op threads per CPU lane")
    parser.add_argument("--action-processes", type=int, default=0,
                        help="torch on CPU: run Action in this many worker processes "
                             "(0: in lane threads)")
    parser.add_argument("--main-cpus", type=cpu_list, default=None, metavar="LIST",
                        help="torch on CPU: pin the lanes and dispatcher to these CPUs, e.g. "
                             "0; Action workers inherit them unless --action-cpus is given")
    parser.add_argument("--action-cpus", type=cpu_list, default=None, metavar="LIST",
                        help="torch on CPU: pin the Action worker processes to these CPUs, "
                             "e.g. 1 (needs --action-processes)")
    parser.add_argument("--compile", choices=COMPILE_MODES, default="off",
                        help="π0 Action loop: eager (off), torch.compile (on) or CUDA graphs "
                             "(cudagraphs); compiled before serving")


def make_torch_backend(args: argparse.Namespace) -> Backend:
    """Build the torch backend from :func:`add_torch_arguments`' options.

    Options a caller's namespace lacks take their defaults (no worker processes, no
    pinning).
    """
    return make_backend("torch", model=args.model, device=args.device, dtype=args.dtype,
                        threads=args.threads, model_path=getattr(args, "model_path", None),
                        action_processes=getattr(args, "action_processes", 0),
                        action_cpus=getattr(args, "action_cpus", None),
                        compile=getattr(args, "compile", "off"),
                        max_batch=getattr(args, "max_batch", 1))
