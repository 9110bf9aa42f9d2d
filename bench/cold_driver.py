"""The child process of the Cold workload (``bench.cold``): one fresh Python and JVM.

``python -m bench.cold_driver ours STAMPS CONFIG`` runs what ``cdc run --once --config CONFIG``
runs (``streaming.cli.main.main``, the ``cdc`` entry point) with timestamps taken around its phases;
``python -m bench.cold_driver plain STAMPS CONFIG ARGS`` builds the same session from the same
config and runs the plain baseline's query once (``availableNow``) over the same landing files.

STAMPS receives ``time.time()`` at: ``python`` (this module runs, before any import of Spark or
the project), ``session`` (the SparkSession is built), ``tables`` (ours: ``Job.create`` returned,
tables prepared), ``batch`` (the first foreachBatch function returned), ``run`` (the query has
ended and ``cdc run`` returned). The parent takes launch and exit.
"""

from __future__ import annotations

import time

STAMPS: dict[str, float] = {"python": time.time()}

import json  # noqa: E402 - after the first stamp on purpose
import sys  # noqa: E402
from collections.abc import Callable  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402


def _stamp_first_batch() -> None:
    """Stamp the end of the first call of any foreachBatch function."""
    from pyspark.sql.streaming.readwriter import DataStreamWriter

    original = DataStreamWriter.foreachBatch

    def foreach_batch(writer: DataStreamWriter, func: Callable[[Any, int], None]) -> Any:
        def stamped(df: Any, batch_id: int) -> None:
            func(df, batch_id)
            STAMPS.setdefault("batch", time.time())

        return original(writer, stamped)

    setattr(DataStreamWriter, "foreachBatch", foreach_batch)  # noqa: B010


def _stamp_returned(owner: Any, attr: str, stamp: str, *, classmethod_: bool = False) -> None:
    """Stamp when ``owner.attr`` returns (the first time)."""
    original = getattr(owner, attr)

    def stamped(*args: Any, **kwargs: Any) -> Any:
        value = original(*args[1:] if classmethod_ else args, **kwargs)
        STAMPS.setdefault(stamp, time.time())
        return value

    setattr(owner, attr, classmethod(stamped) if classmethod_ else stamped)


def ours(config: str) -> int:
    """``cdc run --once --config CONFIG``, phases stamped."""
    import streaming.runtime.session
    from streaming.cli import main as cli
    from streaming.runtime.job import Job

    _stamp_first_batch()
    _stamp_returned(streaming.runtime.session, "build_session", "session")
    _stamp_returned(Job, "create", "tables", classmethod_=True)
    code = cli.main(["run", "--once", "--config", config])
    STAMPS["run"] = time.time()
    return code


def plain(config: str, args_file: str) -> int:
    """The plain baseline's first batch in this fresh process, on the config's session."""
    from bench.plain import plain_landing
    from streaming.core.config import load_config
    from streaming.runtime.session import build_session

    args = json.loads(Path(args_file).read_text())
    _stamp_first_batch()
    spark = build_session(load_config(config).spark)
    STAMPS["session"] = time.time()
    plain_landing(
        spark,
        Path(args["root"]),
        Path(args["landing"]),
        args["tables"],
        1,
        threads=False,
        name="plain-cold",
    )
    STAMPS["run"] = time.time()
    return 0


def main(argv: list[str]) -> int:
    mode, stamps, config, *rest = argv
    try:
        code = ours(config) if mode == "ours" else plain(config, rest[0])
    finally:
        Path(stamps).write_text(json.dumps(STAMPS))
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
