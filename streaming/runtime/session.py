"""The SparkSession factory: Delta Lake + the Kafka connector, local[2] by default.

Jars come from ``jars/spark`` (resolved by ``make jars`` from the pinned pom.xml). On a cluster
set ``spark.master: null`` and pass the jars or ``--packages`` to spark-submit instead.

Spark's driver logs through the log4j2 configuration the package ships
(``streaming/resources/log4j2.properties``: WARN and up, less the warnings that are harmless
here); ``verbose`` (``cdc -v``) leaves Spark its own defaults. The configuration applies when this
process starts the JVM; a user's ``-Dlog4j2.configurationFile`` in
``spark.driver.extraJavaOptions`` wins.
"""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path

from pyspark.sql import SparkSession

from streaming.core.config import SparkConfig
from streaming.core.errors import ConfigError
from streaming.core.versions import check_platform
from streaming.platform.spark import jvm_ignores_stop_signals
from streaming.platform.versions import running

__all__ = [
    "DEFAULT_JARS_DIR",
    "DRIVER_JAVA_OPTIONS",
    "LOG4J2_OPTION",
    "PROJECT_ROOT",
    "build_session",
    "jar_paths",
    "log4j2_config",
    "session_conf",
]

PROJECT_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_JARS_DIR = PROJECT_ROOT / "jars" / "spark"

_BASE_CONF = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
    # On a cluster adaptive execution coalesces shuffle partitions (local mode turns it off).
    "spark.sql.adaptive.enabled": "true",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.streaming.stopGracefullyOnShutdown": "true",
    "spark.databricks.delta.schema.autoMerge.enabled": "false",
    # Readers outside Spark (delta-rs, Trino) must read what we write: keep default table features.
    "spark.databricks.delta.properties.defaults.enableDeletionVectors": "false",
    "spark.ui.showConsoleProgress": "false",
    # A map built with a key twice keeps the last value, as a JSON object and a Python dict do
    # (the default fails the job): change events decoded by Spark (inputs.changeevents).
    "spark.sql.mapKeyDedupPolicy": "LAST_WIN",
    # Compiled code of operators and expressions, shared by all jobs (default 100 classes). A
    # batch plans a few hundred (Delta's own included): with 100, each batch evicted what the
    # next needs and compiled it again — Batch 25 compiled 1,358 classes (16.9 s) instead of
    # 246 (6.4 s), and a batch took 11.3 s instead of 8.4 s. Static: set before the JVM starts.
    "spark.sql.codegen.cache.maxEntries": "1000",
    # Delta's SQL parser drops the parameters of spark.sql(text, args) (delta-io/delta#7640);
    # query schemas bind ${arg} as parameters, which this legacy substitution keeps working.
    "spark.sql.legacy.parameterSubstitution.constantsOnly": "true",
    # Delta's log writes (FileContext) on file: paths through Hadoop's raw local file system.
    # The checksummed default writes a hidden .crc beside each file: twice the entries in each
    # _delta_log, which Delta lists whole at every snapshot update (~50 ms at 2,700 entries on a
    # local disk, ~27 ms without them). Not fs.file.impl: FileSystem.getLocal (S3A's upload
    # buffers) needs the checksummed FileSystem. Delta's own .crc (the version checksum) stays.
    "spark.hadoop.fs.AbstractFileSystem.file.impl": "org.apache.hadoop.fs.local.RawLocalFs",
    # Timestamps in Parquet as INT64 microseconds, not Spark's legacy INT96: readers that take
    # INT96 as nanoseconds (delta-rs, pandas, DuckDB) overflow outside 1677-2262 and fail the
    # whole scan of a table holding 0001-01-01 or 9999-12-31. Micros hold every instant.
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
}

_LOCAL_CONF = {
    # Delta rebuilds table state with 50 partitions by default: far too many for 2 local cores.
    "spark.databricks.delta.snapshotPartitions": "2",
    # VACUUM lists files with this many tasks (default 10000): seconds per table on 2 cores.
    "spark.sql.sources.parallelPartitionDiscovery.parallelism": "4",
    # A micro-batch's plans are small and a few local cores leave nothing to coalesce, while
    # adaptive execution runs every shuffle stage as a Spark job of its own: the batch's check
    # job alone was 9 jobs. On a cluster (no local master) it stays on.
    "spark.sql.adaptive.enabled": "false",
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
}


def jar_paths(jars_dir: str | None) -> list[str]:
    """The jars Spark needs on its classpath; a missing folder is a clear startup error."""
    folder = Path(jars_dir) if jars_dir else DEFAULT_JARS_DIR
    jars = sorted(str(p) for p in folder.glob("*.jar")) if folder.is_dir() else []
    if not any("delta-spark" in Path(j).name for j in jars):
        raise ConfigError(
            f"spark.jars_dir: no Delta jars in {folder}; run `make jars` (mvn resolves pom.xml)"
        )
    return jars


LOG4J2_OPTION = "-Dlog4j2.configurationFile="
DRIVER_JAVA_OPTIONS = "spark.driver.extraJavaOptions"


def log4j2_config() -> Path:
    """The log4j2 configuration the package ships for Spark's driver."""
    return Path(str(resources.files("streaming") / "resources" / "log4j2.properties"))


def _with_logging(conf: dict[str, str], verbose: bool) -> dict[str, str]:
    """``conf`` with the shipped log4j2 configuration in the driver's Java options (kept as
    they are with ``verbose``, or when they name a configuration already)."""
    options = conf.get(DRIVER_JAVA_OPTIONS, "")
    if verbose or LOG4J2_OPTION in options:
        return conf
    ours = f"{LOG4J2_OPTION}{log4j2_config().as_uri()}"
    return {**conf, DRIVER_JAVA_OPTIONS: f"{ours} {options}".strip()}


def session_conf(cfg: SparkConfig, *, verbose: bool = False) -> dict[str, str]:
    """Every Spark setting ``build_session`` gives the builder (``spark.jars`` aside)."""
    local = (cfg.master or "").startswith("local")
    conf = {
        **_BASE_CONF,
        **(_LOCAL_CONF if local else {}),
        "spark.sql.shuffle.partitions": str(cfg.shuffle_partitions),
        "spark.ui.enabled": str(cfg.ui).lower(),
        **cfg.conf,
    }
    return _with_logging(conf, verbose)


def build_session(cfg: SparkConfig, *, verbose: bool = False) -> SparkSession:
    """Create (or return the running) SparkSession configured for Delta and Kafka, or
    ``UnsupportedPlatform`` if it runs a Spark or Delta this code does not support
    (``core.versions``)."""
    builder = SparkSession.builder.appName(cfg.app_name)
    if cfg.master:
        builder = builder.master(cfg.master)
        # Local mode only: on a cluster spark-submit ships the jars.
        builder = builder.config("spark.jars", ",".join(jar_paths(cfg.jars_dir)))
    for key, value in session_conf(cfg, verbose=verbose).items():
        builder = builder.config(key, value)
    os.environ.setdefault("PYSPARK_PYTHON", os.environ.get("PYSPARK_PYTHON", _python()))
    if (cfg.master or "").startswith("local"):
        # The driver binds to 127.0.0.1 (_LOCAL_CONF); said here too, Spark does not look for
        # an outside address first (and warn that the hostname resolves to a loopback one).
        os.environ.setdefault("SPARK_LOCAL_IP", _LOCAL_CONF["spark.driver.bindAddress"])
    with jvm_ignores_stop_signals():
        session = builder.getOrCreate()
    session.sparkContext.setLogLevel(cfg.conf.get("cdc.log.level", "WARN"))
    check_platform(running(session))  # UNSUPPORTED_PLATFORM: other Spark or Delta releases
    return session


def _python() -> str:
    import sys

    return sys.executable
