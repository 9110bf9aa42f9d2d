"""The driver's copy of a tombstones table (``storage.tombstones``): used only at the version
it holds, advanced only by the sink's own append when nothing else committed in between."""

from __future__ import annotations

from typing import Any

from streaming.storage.tombstones import DeletedKeys, later

PATH = "/warehouse/ds/_tombstones/ds/Dog"


def held(version: int, **keys: int) -> DeletedKeys:
    deleted = DeletedKeys()
    deleted._tables[PATH] = (version, {k: (v, None) for k, v in keys.items()})
    return deleted


def rows(**keys: int) -> list[dict[str, Any]]:
    return [{"id": k, "version": v, "watermark": None} for k, v in keys.items()]


def test_held_keys_are_answered_at_the_version_held_without_spark() -> None:
    deleted = held(4, dog1=2, dog2=5)
    spark: Any = None  # a lookup at the held version reads nothing
    assert deleted.of_keys(spark, PATH, 4, ["dog1", "dog3"], watermark=False) == {"dog1": (2, None)}


def test_the_sinks_next_append_advances_the_copy_and_the_latest_version_wins() -> None:
    deleted = held(4, dog1=2)
    deleted.appended(PATH, 4, 5, rows(dog1=9, dog2=3))
    assert deleted._tables[PATH] == (5, {"dog1": (9, None), "dog2": (3, None)})
    deleted.appended(PATH, 5, 6, rows(dog1=1))  # an older version never replaces a newer one
    assert deleted._tables[PATH] == (6, {"dog1": (9, None), "dog2": (3, None)})


def test_a_commit_of_someone_else_in_between_drops_the_copy() -> None:
    deleted = held(4, dog1=2)
    deleted.appended(PATH, 4, 6, rows(dog2=3))  # version 5 was not ours
    assert PATH not in deleted._tables


def test_an_append_to_a_version_not_held_does_not_make_a_copy() -> None:
    deleted = held(4, dog1=2)
    deleted.appended(PATH, 7, 8, rows(dog2=3))
    assert PATH not in deleted._tables
    deleted.appended(PATH, 8, 9, rows(dog2=3))
    assert PATH not in deleted._tables


def test_a_keys_tombstone_is_its_largest_version_then_its_largest_watermark() -> None:
    assert later((3, None), (2, {"ts": 9}))
    assert later((3, {"ts": 5}), (3, {"ts": 4}))  # a skipped delete moved the watermark
    assert later((3, {"ts": 5}), (3, None)) and later((3, {"ts": 5}), (3, {"ts": None}))
    assert not later((3, {"ts": 4}), (3, {"ts": 4}))
