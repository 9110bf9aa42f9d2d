"""The judgement of the running Spark and Delta versions (``core.versions``). No Spark."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from streaming.core.errors import UnsupportedPlatform
from streaming.core.versions import (
    SUPPORTED_DELTA,
    SUPPORTED_SPARK,
    Running,
    check_platform,
    release,
    unsupported,
)

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("version", "expected"),
    [
        ("4.2.0", (4, 2)),
        ("4.2.1", (4, 2)),
        ("4.2.1-SNAPSHOT", (4, 2)),
        ("4.4.0rc1", (4, 4)),
        ("4.20.0", (4, 20)),
        ("4", None),
        ("(not installed)", None),
        ("", None),
    ],
)
def test_release(version: str, expected: tuple[int, int] | None) -> None:
    assert release(version) == expected


def test_the_supported_releases_pass() -> None:
    assert unsupported(Running("4.2.0", "4.4.0", "4.4.0")) == []
    assert unsupported(Running("4.2.3", "4.4.1", None)) == []  # the jar's version unknown
    check_platform(Running("4.2.0", "4.4.0", "4.4.0"))


@pytest.mark.parametrize(
    ("running", "wrong"),
    [
        (Running("4.1.0", "4.4.0", "4.4.0"), ["Spark 4.1.0"]),
        (Running("4.3.0", "4.4.0", "4.4.0"), ["Spark 4.3.0"]),
        (Running("3.5.1", "4.4.0", "4.4.0"), ["Spark 3.5.1"]),
        (Running("4.2.0", "4.3.0", "4.4.0"), ["the delta-spark package 4.3.0"]),
        (Running("4.2.0", "4.4.0", "4.5.0"), ["the Delta jar 4.5.0"]),
        (Running("4.2.0", "(not installed)", None), ["the delta-spark package (not installed)"]),
        (
            Running("4.1.0", "4.3.0", "4.3.0"),
            ["Spark 4.1.0", "the delta-spark package 4.3.0", "the Delta jar 4.3.0"],
        ),
    ],
)
def test_a_mismatch_fails_with_its_code(running: Running, wrong: list[str]) -> None:
    assert unsupported(running) == wrong
    with pytest.raises(UnsupportedPlatform) as caught:
        check_platform(running)
    error = caught.value
    assert error.code == "UNSUPPORTED_PLATFORM"
    assert error.message.startswith(f"unsupported {', '.join(wrong)}: ")
    assert "Spark 4.2.x with Delta 4.4.x" in error.message  # what is supported
    assert "install those" in error.message  # what to do


def test_the_supported_releases_are_pyprojects_pins() -> None:
    """``pyspark>=4.2.0,<4.3`` and ``delta-spark>=4.4.0,<4.5``: the same minor releases."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    pins = {}
    for requirement in project["dependencies"]:
        match = re.match(r"^(pyspark|delta-spark)>=(\d+)\.(\d+)\.\d+,<(\d+)\.(\d+)$", requirement)
        if match:
            low = (int(match[2]), int(match[3]))
            assert (int(match[4]), int(match[5])) == (low[0], low[1] + 1), requirement
            pins[match[1]] = low
    assert pins == {"pyspark": SUPPORTED_SPARK, "delta-spark": SUPPORTED_DELTA}
