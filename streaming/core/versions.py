"""The Spark and Delta versions this code supports, and the judgement of the running ones.

The code reaches into Spark's and Delta's JVM internals (``streaming.platform``), which change
between minor releases: it runs only on the minor releases it is tested with, as pyproject.toml
pins them (``pyspark>=4.2.0,<4.3``, ``delta-spark>=4.4.0,<4.5``). Pure: the versions are read by
``platform.versions``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from streaming.core.errors import UnsupportedPlatform

__all__ = [
    "SUPPORTED_DELTA",
    "SUPPORTED_SPARK",
    "Running",
    "check_platform",
    "release",
    "unsupported",
]

SUPPORTED_SPARK = (4, 2)
"""Spark 4.2.x (pyproject.toml: ``pyspark>=4.2.0,<4.3``)."""

SUPPORTED_DELTA = (4, 4)
"""Delta 4.4.x (pyproject.toml: ``delta-spark>=4.4.0,<4.5``)."""

_RELEASE = re.compile(r"^\s*(\d+)\.(\d+)(?:[.\-+a-zA-Z0-9]*)\s*$")


@dataclass(frozen=True)
class Running:
    """The versions that run: Spark's (``spark.version``), the delta-spark Python package's
    and, when known, the Delta jar's in the JVM (None: not known)."""

    spark: str
    delta_package: str
    delta_jvm: str | None = None


def release(version: str) -> tuple[int, int] | None:
    """(major, minor) of a version string (``4.2.0``, ``4.2.1-SNAPSHOT``, ``4.4.0rc1``); None
    for one that does not start with them."""
    match = _RELEASE.match(version)
    return (int(match[1]), int(match[2])) if match else None


def _text(release: tuple[int, int]) -> str:
    return f"{release[0]}.{release[1]}.x"


def unsupported(running: Running) -> list[str]:
    """What of ``running`` is not supported, one line each (``Spark 4.1.0``, ``the delta-spark
    package 4.3.0``, ``the Delta jar 4.3.0``); empty when everything is."""
    checks = [
        (f"Spark {running.spark}", running.spark, SUPPORTED_SPARK),
        (
            f"the delta-spark package {running.delta_package}",
            running.delta_package,
            SUPPORTED_DELTA,
        ),
    ]
    if running.delta_jvm is not None:
        checks.append((f"the Delta jar {running.delta_jvm}", running.delta_jvm, SUPPORTED_DELTA))
    return [what for what, version, supported in checks if release(version) != supported]


def check_platform(running: Running) -> None:
    """``UnsupportedPlatform`` naming what runs, what is supported and what to do, unless every
    version of ``running`` is supported."""
    wrong = unsupported(running)
    if not wrong:
        return
    raise UnsupportedPlatform(
        f"unsupported {', '.join(wrong)}: this version of cdc runs on Spark "
        f"{_text(SUPPORTED_SPARK)} with Delta {_text(SUPPORTED_DELTA)} (pyspark and the "
        f"delta-spark package, and the Delta jar in the JVM, of those releases); install those "
        f"(`pip install -c constraints.txt .`, `make jars` for the jars) or, on a cluster, "
        f"run on a runtime with Spark {_text(SUPPORTED_SPARK)} and pass delta-spark "
        f"{_text(SUPPORTED_DELTA)} to spark-submit"
    )
