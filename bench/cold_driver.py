"""The child process of the Cold workload (``bench.cold``): one fresh Python and JVM.

``python -m bench.cold_driver ours STAMPS CONFIG`` runs what ``cdc run --once --config CONFIG``
runs (``streaming.cli.main.main``, the ``cdc`` entry point) with timestamps taken around its phases;
``python -m bench.cold_driver plain STAMPS CONFIG ARGS`` builds the same session from the same
config and runs the plain baseline's query once (``availableNow``) over the same landing files.

``python -m bench.cold_driver catchup-plain STAMPS CONFIG ARGS`` is the CatchUp workload's plain
(``bench.catchup.plain_catchup``) on a session built from CONFIG, as ours' would be.

STAMPS receives ``time.time()`` at: ``python`` (this module runs, before any import of Spark or
the project), ``session`` (the SparkSession is built), ``tables`` (ours: ``Job.create`` returned,
tables prepared), ``batch`` (the first foreachBatch function returned), ``run`` (the query has
ended and ``cdc run`` returned). The parent takes launch and exit. At exit, also this process's
peak RSS and its JVM's (``peak_python_mb``, ``peak_jvm_mb``: ``tests.support.memory.own_peaks``)
and, for catchup-plain, ``plain_per_table`` (seconds per table).
"""

from __future__ import annotations

import time

STAMPS: dict[str, Any] = {"python": time.time()}

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


def catchup_plain(config: str, args_file: str) -> int:
    """The CatchUp workload's plain in this fresh process, on the config's session."""
    from bench.catchup import plain_catchup
    from streaming.core.config import load_config
    from streaming.runtime.session import build_session

    args = json.loads(Path(args_file).read_text())
    spark = build_session(load_config(config).spark)
    STAMPS["session"] = time.time()
    tables = {schema: (topic, path) for schema, (topic, path) in args["tables"].items()}
    STAMPS["plain_per_table"] = plain_catchup(spark, args["bootstrap"], tables)
    STAMPS["run"] = time.time()
    return 0


def main(argv: list[str]) -> int:
    mode, stamps, config, *rest = argv
    try:
        if mode == "ours":
            code = ours(config)
        elif mode == "catchup-plain":
            code = catchup_plain(config, rest[0])
        else:
            code = plain(config, rest[0])
    finally:
        from tests.support.memory import own_peaks

        Path(stamps).write_text(json.dumps({**STAMPS, **own_peaks()}))
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
