"""What Spark's driver JVM logs, captured in the test process.

The JVM is a child process: its stderr is the file descriptor it inherited when the session
started (pytest's capture of the session's first test), out of reach of ``capfd``. A log4j2
appender added to the root logger for a while records what Spark logs at the levels the
session lets through (WARN and up, with stack traces: ``%ex``) into a ``StringWriter``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from pyspark.sql import SparkSession

PATTERN = "%p %c: %m%n%ex"
"""As streaming/resources/log4j2.properties writes a line (without the time)."""


@dataclass
class SparkLog:
    """The text logged while the ``spark_log`` block ran (complete once it has ended)."""

    text: str = ""
    lines: list[str] = field(default_factory=list)


@contextmanager
def spark_log(spark: SparkSession, name: str = "test-capture") -> Iterator[SparkLog]:
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    log4j = jvm.org.apache.logging.log4j
    context = log4j.LogManager.getContext(False)
    config = context.getConfiguration()
    writer = jvm.java.io.StringWriter()
    layout = log4j.core.layout.PatternLayout.newBuilder().withPattern(PATTERN).build()
    appender = log4j.core.appender.WriterAppender.createAppender(
        layout, None, writer, name, False, True
    )
    appender.start()
    config.addAppender(appender)
    config.getRootLogger().addAppender(appender, None, None)
    context.updateLoggers()
    captured = SparkLog()
    try:
        yield captured
    finally:
        config.getRootLogger().removeAppender(name)
        context.updateLoggers()
        appender.stop()
        captured.text = str(writer.toString())
        captured.lines = captured.text.splitlines()


def probe(spark: SparkSession, message: str) -> None:
    """Log ``message`` at ERROR from the JVM (to show that a capture sees Spark's lines)."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    jvm.org.apache.logging.log4j.LogManager.getLogger("cdc.test.probe").error(message)
