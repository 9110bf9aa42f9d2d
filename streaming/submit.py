"""The job under ``spark-submit`` (docs/deploy.md): ``cdc run`` as a file spark-submit can run.

    spark-submit [spark options] /path/to/streaming/submit.py --config cdc.yaml [--once]

The arguments are those of ``cdc run``. spark-submit runs a file, not a module, and Python puts
that file's folder first on ``sys.path``: when it is this package's own folder, its modules
(``requests.py``, ``config.py``, ...) would shadow top-level ones of the same name, so that folder
is taken off the path before anything else is imported. A copy of this file anywhere works too:
everything is imported from the installed package.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

__all__ = ["main"]


def _unshadow(path: list[str], here: Path) -> list[str]:
    """``path`` without the package folder ``here`` (a folder holding ``__init__.py``)."""
    if not (here / "__init__.py").exists():
        return path
    return [p for p in path if Path(p or ".").resolve() != here]


def main(argv: Sequence[str] | None = None) -> int:
    """``cdc run`` with ``argv`` (default: the command line); the CLI's exit code."""
    from streaming.cli.main import main as cli_main

    return cli_main(["run", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.path[:] = _unshadow(sys.path, Path(__file__).resolve().parent)
    sys.exit(main())
