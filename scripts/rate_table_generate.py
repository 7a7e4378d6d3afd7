#!/usr/bin/env python3
"""Regenerate the shipped model tables in ``config/`` from the documented interference model.

``rate_table_default.json`` (units run alone) and ``rate_table_default_batch4.json``
(the same model with a batch dimension of four: the simulator's GPU batching
projection). Usage: ``python scripts/rate_table_generate.py [--check]``. ``--check``
exits 1 when a file on disk differs from what the model generates.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from xinfer_ros.core.rate_table import (
    DEFAULT_BATCH_BOUNDS,
    DEFAULT_BATCH_RATE_TABLE_PATH,
    DEFAULT_RATE_TABLE_PATH,
    RateTable,
    interference_model_table,
    load_rate_table,
    write_rate_table,
)

__all__ = ["main"]


def _tables() -> list[tuple[Path, RateTable]]:
    return [(DEFAULT_RATE_TABLE_PATH, interference_model_table()),
            (DEFAULT_BATCH_RATE_TABLE_PATH,
             interference_model_table(max_batch=4, bounds=DEFAULT_BATCH_BOUNDS))]


def main(argv: list[str] | None = None) -> int:
    """Write (or check) the shipped model tables; return the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare instead of writing")
    args = parser.parse_args(argv)
    status = 0
    for path, table in _tables():
        if args.check:
            same = (path.exists() and
                    load_rate_table(path).to_json_dict() ==
                    json.loads(json.dumps(table.to_json_dict())))
            print(f"{path}: {'up to date' if same else 'DIFFERS from the model'}")
            status |= 0 if same else 1
        else:
            out = write_rate_table(table, path)
            print(f"wrote {out} ({len(table.rates)} entries, bounds {table.bounds})")
    return status


if __name__ == "__main__":
    sys.exit(main())
