"""Where a ``locationUri`` may point (``plan.resolve_location``): under ``allowed_locations`` after
``..`` and symlinks, with a scheme data is read from. Pure: no Spark."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from streaming.core.errors import RejectedError
from streaming.core.plan import Location, resolve_location


@pytest.fixture
def base(tmp_path: Path) -> Path:
    (tmp_path / "data" / "in").mkdir(parents=True)
    (tmp_path / "outside").mkdir()
    os.symlink(tmp_path / "outside", tmp_path / "data" / "escape")
    return tmp_path


def _resolve(uri: str, base: Path, allowed: list[str] | None = None) -> Location:
    return resolve_location(uri, base_dir=str(base), allowed=allowed or [str(base / "data")])


def test_local_paths_under_an_allowed_location(base: Path) -> None:
    expected = Location(os.path.realpath(base / "data" / "in"), local=True)
    assert _resolve("./data/in", base) == expected
    assert _resolve(f"file://{base}/data/in", base) == expected
    assert _resolve("./data/x/../in", base) == expected


def test_remote_location_under_an_allowed_one(base: Path) -> None:
    allowed = ["s3a://bucket/landing", "ftp://files.example.com/drop"]
    assert _resolve("s3a://bucket/landing/x/", base, allowed) == Location(
        "s3a://bucket/landing/x", local=False
    )
    assert _resolve("ftp://files.example.com/drop/a", base, allowed).path.startswith("ftp://")


@pytest.mark.parametrize(
    ("uri", "code"),
    [
        ("../outside", "LOCATION_NOT_ALLOWED"),
        ("./data/../outside", "LOCATION_NOT_ALLOWED"),
        ("./data/escape", "LOCATION_NOT_ALLOWED"),  # a symlink out of the allowed folder
        ("/etc", "LOCATION_NOT_ALLOWED"),
        ("s3a://bucket/data", "LOCATION_NOT_ALLOWED"),
        ("ftp://example.com/data", "UNSUPPORTED_SCHEME"),
        ("http://example.com/data.json", "UNSUPPORTED_SCHEME"),
        ("jdbc:postgresql://db/x", "UNSUPPORTED_SCHEME"),
    ],
)
def test_locations_that_are_refused(base: Path, uri: str, code: str) -> None:
    with pytest.raises(RejectedError) as caught:
        _resolve(uri, base)
    assert caught.value.code == code
