"""The package installs beside a cluster's Spark: its runtime dependencies are ranges, and pip,
asked to install it where pyspark and delta-spark already are, installs nothing but it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_installing_the_package_beside_its_pyspark_installs_only_the_package(
    tmp_path: Path,
) -> None:
    report = tmp_path / "report.json"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--dry-run",
            "--no-index",  # everything it needs must be here already: nothing is fetched
            "--no-build-isolation",
            "--ignore-installed",
            "--no-deps",
            "--report",
            str(report),
            str(ROOT),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    (package,) = json.loads(report.read_text())["install"]
    requires = package["metadata"]["requires_dist"]
    pinned = [r for r in requires if "==" in r and "extra ==" not in r]
    assert pinned == [], f"runtime dependencies pinned exactly: {pinned}"
    assert "pyspark<4.3,>=4.2.0" in requires and "delta-spark<4.5,>=4.4.0" in requires
    assert package["metadata"]["license_expression"] == "Apache-2.0"

    # With its dependencies resolved against this environment (pyspark 4.2.0 and the rest
    # installed): only the package itself is installed, no second Spark.
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
            str(ROOT),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    installed = [p["metadata"]["name"] for p in json.loads(report.read_text())["install"]]
    assert installed == ["cdc-processor"]
