#!/usr/bin/env python3
"""Regenerate ``config/rate_table_default.json`` from the documented interference model.

Usage: ``python scripts/rate_table_generate.py [--out PATH] [--check]``. ``--check``
exits 1 when the file on disk differs from what the model generates.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from xinfer_ros.core.rate_table import (
    DEFAULT_RATE_TABLE_PATH,
    interference_model_table,
    load_rate_table,
    write_rate_table,
)

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    """Write (or check) the default rate table; return the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_RATE_TABLE_PATH)
    parser.add_argument("--check", action="store_true", help="compare instead of writing")
    args = parser.parse_args(argv)
    table = interference_model_table()
    if args.check:
        same = (args.out.exists() and
                load_rate_table(args.out).to_json_dict() ==
                json.loads(json.dumps(table.to_json_dict())))
        print(f"{args.out}: {'up to date' if same else 'DIFFERS from the model'}")
        return 0 if same else 1
    path = write_rate_table(table, args.out)
    print(f"wrote {path} ({len(table.rates)} entries, bounds {table.bounds})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
