"""The session's settings: the shipped log4j2 configuration by default, Spark's own with ``-v``.

No JVM starts here; ``tests/integration/test_cli.py`` runs ``cdc demo`` and checks its output.
"""

from __future__ import annotations

import re
import zipfile
from pathlib import Path

import pyspark

from streaming.core.config import SparkConfig
from streaming.runtime.session import (
    DRIVER_JAVA_OPTIONS,
    LOG4J2_OPTION,
    log4j2_config,
    session_conf,
)

ROOT = Path(__file__).resolve().parents[2]


def test_the_driver_logs_through_the_shipped_log4j2_configuration() -> None:
    conf = session_conf(SparkConfig())
    assert conf[DRIVER_JAVA_OPTIONS] == f"{LOG4J2_OPTION}{log4j2_config().as_uri()}"
    assert log4j2_config().is_file()
    assert log4j2_config().parent == ROOT / "streaming" / "resources"
    assert conf["spark.sql.extensions"] == "io.delta.sql.DeltaSparkSessionExtension"


def test_verbose_leaves_spark_its_own_logging() -> None:
    assert DRIVER_JAVA_OPTIONS not in session_conf(SparkConfig(), verbose=True)
    mine = {DRIVER_JAVA_OPTIONS: "-Xss4m"}
    assert session_conf(SparkConfig(conf=mine), verbose=True)[DRIVER_JAVA_OPTIONS] == "-Xss4m"


def test_the_users_java_options_are_kept_and_their_log4j2_file_wins() -> None:
    kept = session_conf(SparkConfig(conf={DRIVER_JAVA_OPTIONS: "-Xss4m"}))[DRIVER_JAVA_OPTIONS]
    assert kept.startswith(LOG4J2_OPTION) and kept.endswith(" -Xss4m")
    theirs = f"{LOG4J2_OPTION}/etc/cdc/log4j2.xml -Xss4m"
    conf = session_conf(SparkConfig(conf={DRIVER_JAVA_OPTIONS: theirs}))
    assert conf[DRIVER_JAVA_OPTIONS] == theirs


def test_the_log4j2_configuration_is_package_data() -> None:
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert '"resources/*.properties"' in pyproject


def _spark_classes() -> set[str]:
    jars = Path(pyspark.__file__).parent / "jars"
    names: set[str] = set()
    for jar in jars.glob("*.jar"):
        with zipfile.ZipFile(jar) as archive:
            names.update(
                n.removesuffix(".class").replace("/", ".")
                for n in archive.namelist()
                if n.endswith(".class") and "$" not in n
            )
    return names


def test_every_silenced_logger_names_a_class_spark_has() -> None:
    """A logger renamed by a Spark upgrade would silently stop silencing its warning."""
    text = log4j2_config().read_text()
    loggers = re.findall(r"^logger\.\w+\.name = (\S+)$", text, flags=re.MULTILINE)
    silenced = [name for name in loggers if name.startswith(("org.apache.spark", "org.apache.h"))]
    assert len(silenced) >= 3
    classes = _spark_classes()
    missing = [name for name in silenced if name not in classes]
    assert missing == []
    # Anything else still shows from WARN up: a new warning is seen (and fails the demo's test).
    assert re.search(r"^rootLogger\.level = warn$", text, flags=re.MULTILINE)


def test_compiled_code_is_cached_for_a_batchs_worth_of_plans_unless_the_user_says() -> None:
    key = "spark.sql.codegen.cache.maxEntries"
    assert int(session_conf(SparkConfig())[key]) >= 1000  # Spark's default of 100 thrashes
    assert session_conf(SparkConfig(conf={key: "50"}))[key] == "50"


def test_delta_logs_on_local_paths_go_through_hadoops_raw_file_system() -> None:
    """No hidden .crc beside each commit file: half the entries in every _delta_log listing;
    the FileSystem stays Hadoop's (S3A's upload buffers need FileSystem.getLocal's class)."""
    conf = session_conf(SparkConfig())
    assert conf["spark.hadoop.fs.AbstractFileSystem.file.impl"].endswith(".RawLocalFs")
    assert "spark.hadoop.fs.file.impl" not in conf
