"""Count the engine dispatcher's steps by what woke them, over one ``xinfer-bench`` run.

Usage, from the repository root, as one command line (what made ``unb_steps.json``
and ``sw_steps.json``)::

    python docs/data/cpu-2026-12-06-switch/steps/count_steps.py OUT.json engine
        --backend torch --model pi0-tiny --duration 30 --warmup 10 --action-processes 2
        --workload phases --robots 6 --rate-table docs/data/cpu-2026-12-06-switch/rtf.json
        --policy P --slots S [--max-batch 4] --json RUN.json

A step with no event is a tick; otherwise the step is named by its events' types.
"""

from __future__ import annotations

import atexit
import collections
import json
import sys

from xinfer_ros.engine import engine
from xinfer_ros.engine.events import Event

KINDS: collections.Counter[str] = collections.Counter()
_STEP = engine.StageEngine._step


def _counted(self: engine.StageEngine, batch: list[Event]) -> object:
    KINDS["tick" if not batch else "+".join(sorted({type(e).__name__ for e in batch}))] += 1
    return _STEP(self, batch)


def _write(path: str) -> None:
    with open(path, "w") as f:
        json.dump(dict(KINDS), f, indent=1)


if __name__ == "__main__":  # the Action worker processes import this module too
    engine.StageEngine._step = _counted  # type: ignore[method-assign]
    atexit.register(_write, sys.argv.pop(1))
    from xinfer_ros.cli.bench import main

    sys.exit(main(sys.argv[1:]))
