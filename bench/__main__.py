"""``python -m bench [--quick] [--workloads W1,W2,Scale] [--output bench/results.json]``."""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path

from bench.run import render, run
from bench.sizes import FULL, QUICK

WORKLOADS = ("W1", "W2", "Scale", "Sweep")
DEFAULT = ("W1", "W2", "Scale")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="the workloads scaled down (<5 min)")
    parser.add_argument(
        "--workloads",
        default=",".join(DEFAULT),
        help=f"comma-separated subset of {', '.join(WORKLOADS)}",
    )
    parser.add_argument(
        "--output", type=Path, default=Path(__file__).parent / "results.json", help="JSON results"
    )
    parser.add_argument(
        "--w1-transactions",
        type=int,
        help="W1: apply only the first N transactions of the generated stream (same data)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the /tmp workspace")
    parser.add_argument(
        "--render",
        type=Path,
        metavar="RESULTS",
        help="print the table of a results file, run nothing",
    )
    args = parser.parse_args(argv)
    if args.render:
        print(render(json.loads(args.render.read_text())))
        return 0
    chosen = [w.strip() for w in args.workloads.split(",") if w.strip()]
    unknown = sorted(set(chosen) - set(WORKLOADS))
    if unknown:
        parser.error(f"unknown workloads {unknown}; choose from {WORKLOADS}")
    sizes = QUICK if args.quick else FULL
    if args.w1_transactions:
        sizes = replace(sizes, w1_transactions=args.w1_transactions)
    run(sizes, chosen, args.output, keep=args.keep)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
