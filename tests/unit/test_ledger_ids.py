"""The driver's copy of the ledger's ids (``ledger.HeldIds``): answered only at the version it
holds, moved along only by the sink's own append when nothing else committed in between and the
ledger is still small enough; anything else forgets it (the next batch reads the ids again)."""

from __future__ import annotations

from typing import Any

import pytest

from streaming.storage import ledger
from streaming.storage.ledger import HeldIds

PATH = "/warehouse/_system/transactions"


def held(version: int, *ids: str, max_bytes: int = 1000) -> HeldIds:
    return HeldIds(max_bytes=max_bytes, version=version, ids=set(ids), asked=True)


def test_held_ids_are_answered_at_their_version_without_spark() -> None:
    spark: Any = None  # a lookup at the held version reads nothing
    assert held(4, "t1", "t2").at(spark, PATH, 4) == {"t1", "t2"}


@pytest.mark.parametrize("size", [100, None], ids=["rows", "size-unknown"])
def test_the_first_batch_of_a_process_is_looked_up_not_held(
    monkeypatch: pytest.MonkeyPatch, size: int | None
) -> None:
    spark: Any = None  # nothing is read: the caller looks the batch's ids up itself
    monkeypatch.setattr(ledger, "known_size", lambda *_: size)  # Delta's checksum
    fresh = HeldIds()
    assert fresh.at(spark, PATH, 7) is None
    assert fresh.asked and fresh.version is None


def test_an_empty_ledger_is_held_from_the_first_batch_on(monkeypatch: pytest.MonkeyPatch) -> None:
    spark: Any = None  # nothing is read: the checksum says the ledger holds no file
    monkeypatch.setattr(ledger, "known_size", lambda *_: 0)
    fresh = HeldIds()
    assert fresh.at(spark, PATH, 0) == set()
    assert fresh.asked and fresh.version == 0
    fresh.appended(0, 1, ["t1"], size=100)
    assert (fresh.version, fresh.ids) == (1, {"t1"})


def test_the_sinks_own_append_moves_the_ids_along() -> None:
    ids = held(4, "t1")
    ids.appended(4, 5, ["t2", "t3"], size=100)
    assert (ids.version, ids.ids) == (5, {"t1", "t2", "t3"})


@pytest.mark.parametrize(
    ("before", "after", "size"),
    [
        (4, 6, 100),  # another commit besides ours: its ids are unknown
        (3, 4, 100),  # the ids were of another version than the append's
        (None, 5, 100),  # not held when the batch looked up its ids
        (4, 5, None),  # the ledger's size unknown
        (4, 5, 5000),  # grown past max_bytes
    ],
)
def test_anything_but_the_only_commit_being_ours_forgets_the_ids(
    before: int | None, after: int, size: int | None
) -> None:
    ids = held(4, "t1")
    ids.appended(before, after, ["t2"], size=size)
    assert (ids.version, ids.ids) == (None, set())
