"""tests/support/jvm_archive.py: one process at a time makes an archive, a stale claim is taken
again, and an archive is only put in place whole."""

from __future__ import annotations

import os
import time
from pathlib import Path

from tests.support import jvm_archive


def test_one_claim_at_a_time_and_released_by_finish(tmp_path: Path) -> None:
    archive = tmp_path / "cdc-1.jsa"
    partial = jvm_archive.claim(archive)
    assert partial is not None and partial.parent == tmp_path
    assert jvm_archive.claim(archive) is None  # another process is making it
    assert jvm_archive.finish(archive, partial, ok=False) is False
    assert not archive.exists() and not archive.with_suffix(".lock").exists()
    assert jvm_archive.claim(archive) is not None  # free again


def test_a_stale_claim_is_taken_again(tmp_path: Path) -> None:
    archive = tmp_path / "cdc-1.jsa"
    assert jvm_archive.claim(archive) is not None
    stale = time.time() - jvm_archive.MAKING_TIMEOUT - 1
    os.utime(archive.with_suffix(".lock"), (stale, stale))
    assert jvm_archive.claim(archive) is not None


def test_a_dump_that_did_not_end_well_is_not_put_in_place(tmp_path: Path) -> None:
    archive = tmp_path / "cdc-1.jsa"
    partial = jvm_archive.claim(archive)
    assert partial is not None
    partial.write_bytes(b"half an archive")
    assert jvm_archive.finish(archive, partial, ok=False) is False
    assert not archive.exists() and not partial.exists()
    assert jvm_archive.jvm_options(archive) == ""


def test_no_claim_and_its_options_once_the_archive_is_there(tmp_path: Path) -> None:
    archive = tmp_path / "cdc-1.jsa"
    archive.write_bytes(b"made")
    assert jvm_archive.claim(archive) is None
    assert f"-XX:SharedArchiveFile={archive}" in jvm_archive.jvm_options(archive)
    assert "-Xlog:cds=off" in jvm_archive.jvm_options(archive)


def test_the_key_follows_the_jars(tmp_path: Path) -> None:
    (tmp_path / "a.jar").write_bytes(b"1")
    before = jvm_archive.archive_for("cdc", tmp_path)
    (tmp_path / "b.jar").write_bytes(b"2")
    assert jvm_archive.archive_for("cdc", tmp_path) != before
    assert before.name.startswith("cdc-") and before.suffix == ".jsa"


def test_a_failed_making_is_not_started_again(tmp_path: Path) -> None:
    archive = tmp_path / "cdc-1.jsa"
    archive.with_suffix(".failed").write_text("the demo exited 1\n")
    assert jvm_archive.start_making(archive) is False
    assert not archive.with_suffix(".lock").exists()
