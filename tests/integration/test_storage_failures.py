"""The warehouse's storage fails under the job (issue 37, "clear failures"): a file system
mounted read-only at startup, a disk that fills up during a batch. ``cdc run`` ends with
STORAGE_NOT_WRITABLE / STORAGE_FULL and exit 2, one line saying what to do, no traceback; once
the storage is fixed the same input is applied, once.

The warehouse is a tmpfs of its own (``mount``: the tests run as root here, as under CI; a
machine where mounting is refused fails the test under CI and skips it elsewhere, saying why)."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import deltalake
import pytest
import yaml

from streaming.cli.main import main
from streaming.core.layout import Layout
from tests.support import request, upsert
from tests.support.datasets import DOG

pytestmark = pytest.mark.spark


def _mount(where: Path, options: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(where)],
        capture_output=True,
        text=True,
        timeout=30,
    )


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 512 KiB tmpfs at ``tmp_path/disk``, unmounted afterwards."""
    where = tmp_path / "disk"
    where.mkdir()
    done = _mount(where, "size=512k")
    if done.returncode != 0:
        reason = f"cannot mount a tmpfs here ({done.stderr.strip()}): needs root"
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(reason)
        pytest.skip(reason)
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False, timeout=30)


def _remount(where: Path, options: str) -> None:
    done = subprocess.run(
        ["mount", "-o", f"remount,{options}", str(where)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr


def test_a_read_only_then_full_warehouse_stops_the_job_with_its_code_and_loses_nothing(
    spark: object,  # `cdc run` in this process gets the session's SparkSession
    small_disk: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    for key in [k for k in os.environ if k.startswith("CDC_")]:
        monkeypatch.delenv(key)
    (tmp_path / "petstore.yaml").write_text(DOG)
    small = tmp_path / "data" / "small" / "petstore" / "Dog" / "part.json"
    small.parent.mkdir(parents=True)
    small.write_text('{"id": "dog1", "name": "Rex"}\n')
    big = tmp_path / "data" / "big" / "petstore" / "Dog" / "part.json"
    big.parent.mkdir(parents=True)  # ~1.2 MB of names that do not compress: more than the disk
    big.write_text(
        "".join(
            json.dumps({"id": f"b{n}", "name": os.urandom(100).hex()}) + "\n" for n in range(6000)
        )
    )
    landing = tmp_path / "landing"
    landing.mkdir()
    config = tmp_path / "cdc.yaml"
    warehouse = small_disk / "warehouse"
    config.write_text(
        yaml.safe_dump(
            {
                "warehouse": str(warehouse),
                "checkpoints": "./checkpoints",
                "datasets": {"petstore": "petstore.yaml"},
                "landing": {"transactions": "./landing"},
                "allowed_locations": ["./data"],
                "base_dir": str(tmp_path),
                "spark": {"shuffle_partitions": 2},
            }
        )
    )
    layout = Layout(str(warehouse), str(tmp_path / "checkpoints"), "cdc")

    def run() -> tuple[int, str]:
        capfd.readouterr()
        code = main(["run", "--once", "--config", str(config)])
        return code, capfd.readouterr().err

    # 1. Read-only at startup: the tables cannot be created; nothing is read.
    (landing / "0001.jsonl").write_text(request("tx-small", upsert("./data/small")) + "\n")
    _remount(small_disk, "ro")
    code, said = run()
    assert code == 2, said[-3000:]
    errors = [line for line in said.splitlines() if line.startswith("cdc: error")]
    refused = "cdc: error [STORAGE_NOT_WRITABLE]: the job could not write to the warehouse "
    refused += str(warehouse)
    assert errors and errors[-1].startswith(refused), said[-3000:]
    # (Hadoop's mkdirs does not say why it failed: Delta names the folder it could not create)
    assert "DELTA_CANNOT_CREATE_LOG_PATH" in errors[-1] and "write access" in said
    assert "Traceback (most recent call last)" not in said
    assert not (tmp_path / "checkpoints" / "cdc" / "offsets").exists()

    # 2. Writable again: applied. Then a batch larger than the disk fails as it writes.
    _remount(small_disk, "rw")
    code, said = run()
    assert code == 0, said[-3000:]
    (landing / "0002.jsonl").write_text(request("tx-big", upsert("./data/big")) + "\n")
    code, said = run()
    assert code == 2, said[-3000:]
    errors = [line for line in said.splitlines() if line.startswith("cdc: error")]
    assert errors and errors[-1].startswith("cdc: error [STORAGE_FULL]: the job could not write"), (
        said[-3000:]
    )
    assert "No space left on device" in errors[-1] and "free space" in said

    # 3. More space: the failed batch is replayed; every transaction committed once.
    _remount(small_disk, "size=64m")
    code, said = run()
    assert code == 0, said[-3000:]
    outcomes = deltalake.DeltaTable(layout.outcomes).to_pyarrow_table(
        columns=["transaction_id", "status"]
    )
    assert sorted((r["transaction_id"], r["status"]) for r in outcomes.to_pylist()) == [
        ("tx-big", "COMMITTED"),
        ("tx-small", "COMMITTED"),
    ]
    dogs = deltalake.DeltaTable(layout.table("petstore", "petstore.Dog")).to_pyarrow_table()
    assert dogs.num_rows == 6001
    history = deltalake.DeltaTable(layout.history("petstore", "petstore.Dog")).to_pyarrow_table()
    assert history.num_rows == 6001  # one history row per change: nothing written twice
