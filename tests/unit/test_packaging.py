"""The package installs beside a cluster's Spark: its runtime dependencies are ranges, and pip,
asked to install it where pyspark and delta-spark already are, installs nothing but it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def would_install(report: Path, *options: str) -> list[dict[str, Any]]:
    """What ``pip install`` of this checkout would install here (a dry run, nothing fetched:
    everything it needs must be installed already)."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--dry-run",
            "--no-index",
            "--no-build-isolation",
            "--report",
            str(report),
            *options,
            str(ROOT),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    installed: list[dict[str, Any]] = json.loads(report.read_text())["install"]
    return installed


def test_installing_the_package_beside_its_pyspark_installs_only_the_package(
    tmp_path: Path,
) -> None:
    (package,) = would_install(tmp_path / "alone.json", "--ignore-installed", "--no-deps")
    requires = package["metadata"]["requires_dist"]
    pinned = [r for r in requires if "==" in r and "extra ==" not in r]
    assert pinned == [], f"runtime dependencies pinned exactly: {pinned}"
    assert "pyspark<4.3,>=4.2.0" in requires and "delta-spark<4.5,>=4.4.0" in requires
    assert package["metadata"]["license_expression"] == "Apache-2.0"

    # With its dependencies resolved against this environment (pyspark 4.2.0 and the rest
    # installed): only the package itself is installed, no second Spark.
    beside = would_install(tmp_path / "beside.json")
    assert [p["metadata"]["name"] for p in beside] == ["cdc-processor"]
