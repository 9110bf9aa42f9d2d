"""Seed 001: watermark and tombstone keys, on the pure fold."""

from __future__ import annotations

from datetime import UTC, datetime

from streaming.core.fold import Change, ChangeKind, Stored, fold, watermark_key

AT = datetime(2024, 1, 1, tzinfo=UTC)


def put(seq: int, ts: object, kind: ChangeKind = ChangeKind.UPSERT, **data: object) -> Change:
    return Change(seq, f"tx{seq}", kind, AT, {"ts": ts, **data}, watermark=(ts,))


def test_seed_001_order_1_rows_ts_100_and_200_the_larger_watermark_wins() -> None:
    for order in (
        [put(1, 100, v="a"), put(2, 200, v="b")],
        [put(1, 200, v="b"), put(2, 100, v="a")],
    ):
        out = fold(Stored(), order)
        assert out.final.data == {"ts": 200, "v": "b"}
        assert out.final.watermark == (200,)


def test_seed_001_order_2_deleted_at_ts_200_is_deleted() -> None:
    out = fold(Stored(), [put(1, 100, v="a"), put(2, 200, ChangeKind.DELETE, v="a")])
    assert not out.final.live and out.final.watermark == (200,)
    assert [h.op for h in out.history] == ["i", "d"]


def test_update_older_than_the_stored_row_is_stale_and_ignored() -> None:
    stored = Stored({"ts": 200, "v": "b"}, 3, AT, AT, (200,))
    out = fold(stored, [put(1, 150, v="old")])
    assert out.final == stored and out.effects == [(1, "stale")] and out.history == []


def test_late_update_after_a_newer_delete_does_not_resurrect() -> None:
    out = fold(
        Stored({"ts": 100, "v": "a"}, 1, AT, AT, (100,)),
        [put(1, 300, ChangeKind.DELETE, v="a"), put(2, 200, v="late")],
    )
    assert not out.final.live and out.effects == [(1, "deleted"), (2, "stale")]
    # the same late update in a later batch, against the remembered tombstone
    again = fold(out.final, [put(3, 200, v="late")])
    assert again.effects == [(3, "stale")] and not again.final.live


def test_null_watermark_is_the_smallest() -> None:
    assert watermark_key((None,)) < watermark_key((0,))
    out = fold(Stored({"ts": 1, "v": "a"}, 1, AT, AT, (1,)), [put(1, None, v="null")])
    assert out.effects == [(1, "stale")]


def test_composite_watermarks_compare_left_to_right() -> None:
    assert watermark_key((1, 9)) < watermark_key((2, 0))
    assert watermark_key((2, None)) < watermark_key((2, 0))
    stored = Stored({"v": "a"}, 1, AT, AT, (2, 5))
    older = Change(1, "t1", ChangeKind.UPSERT, AT, {"v": "old"}, watermark=(2, 4))
    newer = Change(2, "t2", ChangeKind.UPSERT, AT, {"v": "new"}, watermark=(3, 0))
    assert fold(stored, [older, newer]).effects == [(1, "stale"), (2, "updated")]


def test_equal_watermarks_the_later_change_wins() -> None:
    out = fold(Stored(), [put(1, 100, v="first"), put(2, 100, v="second")])
    assert out.final.data == {"ts": 100, "v": "second"}


def test_a_delete_of_a_key_not_live_keeps_its_watermark_so_older_changes_are_stale() -> None:
    """Seed 001: of a key's rows the one with the largest watermark is read. A DMS delete newer
    than the insert after it in file order (the W2 benchmark's plain one-MERGE found this) leaves
    the key deleted: nothing to delete (``skipped``), but its watermark is kept, as a tombstone
    of the key's version (0 for a key never seen), without a history row."""
    out = fold(
        Stored(),
        [put(1, 300, ChangeKind.DELETE, v="a"), put(2, 100, v="old"), put(3, 200, v="older")],
    )
    assert out.effects == [(1, "skipped"), (2, "stale"), (3, "stale")]
    assert not out.final.live and out.final.watermark == (300,) and out.final.version == 0
    assert out.changed and out.history == []
    # in a later batch, against the remembered tombstone
    assert fold(out.final, [put(4, 250, v="late")]).effects == [(4, "stale")]
    # a tombstone's watermark moves forward, its version stays
    moved = fold(Stored(None, 3, watermark=(100,)), [put(1, 300, ChangeKind.DELETE)])
    assert moved.changed and moved.final.version == 3 and moved.final.watermark == (300,)
    # a newer insert after it revives the key
    back = fold(out.final, [put(5, 400, v="new")])
    assert back.effects == [(5, "inserted")] and back.final.version == 1


def test_a_delete_of_a_key_not_live_with_an_equal_or_no_watermark_changes_nothing() -> None:
    tombstone = Stored(None, 3, watermark=(300,))
    assert not fold(tombstone, [put(1, 300, ChangeKind.DELETE)]).changed
    unmarked = Change(1, "tx1", ChangeKind.DELETE, AT, {"v": None})
    assert not fold(Stored(), [unmarked]).changed
