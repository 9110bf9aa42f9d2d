"""Spark's internals that PySpark does not expose: the session's parsed settings, a frame's plan
and inputs, a streaming query's current batch, the scheduler's job ids, the driver JVM itself.

Internals used: PySpark's ``SparkSession._jsparkSession``, ``SparkContext._jvm``,
``SparkContext._jsc``, ``SparkContext._gateway``, ``DataFrame._jdf``, ``Column._jc``,
``StreamingQuery._jsq``, the classic ``Column`` wrapper, py4j's ``Py4JJavaError`` and the
``Popen`` of PySpark's ``java_gateway`` module.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from py4j.java_gateway import JavaClass
from py4j.protocol import Py4JJavaError
from pyspark import SparkContext, java_gateway
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql.classic.column import Column as JvmColumn
from pyspark.sql.streaming.query import StreamingQuery

__all__ = [
    "CALLBACK_LOGGER",
    "GATEWAY_LOGGER",
    "INTERRUPTIONS",
    "auto_broadcast_threshold",
    "batch_root_paths",
    "driver_max_heap",
    "gateway_id",
    "input_files",
    "interruption_line",
    "is_in_split",
    "jclass",
    "jvm",
    "jvm_ignores_stop_signals",
    "kill_driver_jvm",
    "memory_bytes",
    "next_job_id",
    "plan_size_bytes",
    "sleep_until_interrupted",
    "unpersist",
]


def jvm(spark: SparkSession) -> Any:
    """The driver JVM's gateway view (``SparkContext._jvm``): the one the platform's modules
    build Java objects with."""
    found = spark.sparkContext._jvm
    assert found is not None
    return found


_CLASSES: dict[str, tuple[Any, Any]] = {}
"""Java class name → (the gateway client it was made for, its py4j ``JavaClass``)."""


def jclass(spark: SparkSession, name: str) -> Any:
    """The Java class ``name`` (fully qualified) as py4j's ``JavaClass``, for its static members
    and constructor, made once per gateway. ``jvm(spark).a.b.C`` asks the JVM name by name
    whether each prefix is a class (a failed lookup across every jar on the classpath, and a
    name at the root is tried under each package PySpark imports too): a warm one-transaction
    batch made 1,525 such lookups, 654 once ``DeltaLog``, Hadoop's ``Path`` and ``Option`` were
    taken this way (and the table properties read without iterating a Java map)."""
    client = spark.sparkContext._gateway._gateway_client  # type: ignore[union-attr]
    known = _CLASSES.get(name)
    if known is None or known[0] is not client:
        known = (client, JavaClass(name, client))
        _CLASSES[name] = known
    return known[1]


def gateway_id(spark: SparkSession) -> int:
    """An id of the session's py4j gateway: a new JVM, a new id (``SparkContext._gateway``)."""
    return id(spark.sparkContext._gateway)


def kill_driver_jvm(spark: SparkSession) -> None:
    """Kill the driver JVM this process started (the ``Popen`` PySpark keeps as
    ``SparkContext._gateway.proc``) and wait for it up to 10 s; nothing under spark-submit,
    where the JVM is this process's parent."""
    proc = getattr(spark.sparkContext._gateway, "proc", None)
    if proc is not None:
        proc.kill()
        with contextlib.suppress(Exception):
            proc.wait(timeout=10)


def next_job_id(spark: SparkSession) -> int:
    """The id Spark's scheduler gives its next job: job ids count up from 0 per application
    (``SparkContext._jsc.sc().dagScheduler().nextJobId()``)."""
    return int(spark.sparkContext._jsc.sc().dagScheduler().nextJobId())


def auto_broadcast_threshold(spark: SparkSession) -> int:
    """The session's ``spark.sql.autoBroadcastJoinThreshold`` in bytes, as Spark parses it
    (``SparkSession._jsparkSession.sessionState().conf()``; -1: broadcast joins off)."""
    return int(spark._jsparkSession.sessionState().conf().autoBroadcastJoinThreshold())


def driver_max_heap(spark: SparkSession) -> int:
    """The driver JVM's maximum heap in bytes (``Runtime.getRuntime().maxMemory()``)."""
    return int(jclass(spark, "java.lang.Runtime").getRuntime().maxMemory())


def plan_size_bytes(frame: DataFrame) -> int:
    """Spark's estimate of a frame's size in bytes, from its optimised plan's statistics
    (``DataFrame._jdf.queryExecution().optimizedPlan().stats().sizeInBytes()``): for a file
    scan, the files' size."""
    return int(frame._jdf.queryExecution().optimizedPlan().stats().sizeInBytes())


def input_files(frame: DataFrame) -> list[str]:
    """``DataFrame.inputFiles()`` in one py4j call for the whole list, not one per file as
    PySpark's reads a Java ``String[]`` (Hadoop's ``StringUtils.join`` over ``_jdf.inputFiles``)."""
    gateway = jvm(frame.sparkSession)
    joined = str(gateway.org.apache.hadoop.util.StringUtils.join("\n", frame._jdf.inputFiles()))
    return [p for p in joined.split("\n") if p]


def memory_bytes(materialised: DataFrame) -> int | None:
    """The bytes a frame materialised by ``localCheckpoint`` holds in Spark's block manager
    (memory and disk), from Spark's storage info: no job. None when the frame is not one or
    Spark does not say (``_jdf.queryExecution().analyzed()``'s ``LogicalRDD``,
    ``SparkContext.getRDDStorageInfo``)."""
    plan = materialised._jdf.queryExecution().analyzed()
    if plan.getClass().getSimpleName() != "LogicalRDD":
        return None
    rdd = plan.rdd().id()
    context = materialised.sparkSession.sparkContext._jsc
    for info in context.sc().getRDDStorageInfo():
        if info.id() == rdd:
            return int(info.memSize()) + int(info.diskSize())
    return None


def is_in_split(column: Column, joined: str, separator: str) -> Column:
    """``column IN (values)`` over the values of ``joined`` split at ``separator`` in the JVM:
    they cross py4j as one string (``java.util.regex.Pattern.splitAsStream``, then
    ``Column._jc.isInCollection``), where ``Column.isin`` makes a call per value."""
    context = SparkContext._active_spark_context
    assert context is not None and context._jvm is not None
    jvm = context._jvm
    pattern = jvm.java.util.regex.Pattern
    listed = (
        pattern.compile(pattern.quote(separator))
        .splitAsStream(joined)
        .collect(jvm.java.util.stream.Collectors.toList())
    )
    return JvmColumn(column._jc.isInCollection(listed))  # type: ignore[operator]  # typed abstract


def batch_root_paths(query: StreamingQuery, batch_id: int) -> list[str]:
    """The root paths of the file relations of the running micro-batch ``batch_id``'s plan, as
    Hadoop writes a path; empty when the query's last execution is not that batch's
    (``StreamingQuery._jsq.streamingQuery().lastExecution()``, its analysed plan's
    ``LogicalRelation`` leaves over a ``HadoopFsRelation``). Raises whatever py4j raises when
    Spark's internals are not as expected."""
    files: list[str] = []
    execution = query._jsq.streamingQuery().lastExecution()
    if execution is None or execution.currentBatchId() != batch_id:
        return []
    leaves = execution.analyzed().collectLeaves()
    for i in range(leaves.size()):
        leaf = leaves.apply(i)
        if leaf.getClass().getSimpleName() != "LogicalRelation":
            continue
        relation = leaf.relation()
        if relation.getClass().getSimpleName() == "HadoopFsRelation":
            # One string, not a py4j call per file of the batch (landing files included).
            joined = relation.location().rootPaths().mkString("\n")
            files.extend(f for f in joined.split("\n") if f)
    return files


def sleep_until_interrupted(spark: SparkSession, ms: int) -> str | None:
    """Sleep in the JVM on this thread (``java.lang.Thread.sleep``) for ``ms``; if the thread is
    interrupted meanwhile, the interruption as a traceback names it (``interruption_line``);
    None if none came."""
    try:
        jclass(spark, "java.lang.Thread").sleep(ms)
    except Py4JJavaError as e:
        return _line(e, str(e.java_exception))
    return None


INTERRUPTIONS = ("java.lang.InterruptedException", "java.nio.channels.ClosedByInterruptException")
"""The Java exceptions of a thread's interruption (or of the I/O it cut short)."""


def interruption_line(error: BaseException) -> str | None:
    """The interruption of this thread an error of a JVM call is (a py4j ``Py4JJavaError`` of
    one of ``INTERRUPTIONS``), as one short line: ``py4j.protocol.Py4JJavaError: <py4j's
    message>`` then ``: <Java class>``; None for any other error."""
    if not isinstance(error, Py4JJavaError):
        return None
    name = str(error.java_exception.getClass().getName())
    if name not in INTERRUPTIONS:
        return None
    return _line(error, name)


def _line(error: Py4JJavaError, java: str) -> str:
    kind = type(error)
    return f"{kind.__module__}.{kind.__qualname__}: {error.errmsg.rstrip()}\n: {java}"


GATEWAY_LOGGER = "py4j"
"""py4j's logger: it logs every JVM call at DEBUG."""

CALLBACK_LOGGER = "py4j.clientserver"
"""py4j's logger of the callback server: it logs, with its traceback, every exception a Python
callback (a ``foreachBatch`` function) raises."""


@contextmanager
def jvm_ignores_stop_signals() -> Iterator[None]:
    """A driver JVM this process starts meanwhile ignores SIGTERM, as PySpark has it ignore SIGINT:
    the driver owns its lifetime. A supervisor that signals the whole process group (systemd's
    ``KillMode=control-group``, supervisord's ``stopasgroup``, ``kill -TERM -<pgid>``) then
    reaches only this process, whose clean stop (``runtime.stopping``) finishes the running
    batch, stops Spark and exits; the JVM ends with it (PySpark's gateway exits when its stdin,
    this process's pipe, closes). A JVM started with SIGTERM ignored installs no handler of its
    own for it (HotSpot keeps an inherited ``SIG_IGN`` for its shutdown signals). SIGKILL and
    SIGSTOP still reach both.

    PySpark gives ``Popen`` its own ``preexec_fn`` (SIGINT ignored), replacing any the caller
    passes: the ``Popen`` its gateway module calls is wrapped for the time of the launch, to
    run that function and then ignore SIGTERM. Under spark-submit the JVM runs already, and
    nothing is launched."""
    original = java_gateway.Popen  # type: ignore[attr-defined]

    class _Popen(subprocess.Popen[bytes]):
        def __init__(self, *args: Any, preexec_fn: Callable[[], Any] | None = None, **kw: Any):
            def ignore_stop_signals() -> None:
                if preexec_fn is not None:
                    preexec_fn()
                signal.signal(signal.SIGTERM, signal.SIG_IGN)

            super().__init__(*args, preexec_fn=ignore_stop_signals, **kw)  # type: ignore[call-overload]

    java_gateway.Popen = _Popen  # type: ignore[attr-defined, assignment]
    try:
        yield
    finally:
        java_gateway.Popen = original  # type: ignore[attr-defined]


def unpersist(frames: list[DataFrame], start: int = 0) -> None:
    """Unpersist ``frames[start:]``, each taken off the list only once Spark has let it go: a
    release the job's stop interrupts (an ``InterruptedException`` in the batch's thread) leaves
    the rest on the list, for the job to release once the query has ended."""
    while len(frames) > start:
        frames[-1].unpersist()
        frames.pop()
