"""The versioning rules (docs/architecture.md, "Versions") on single keys, without Spark."""

from __future__ import annotations

from datetime import UTC, datetime

from streaming.core.fold import Change, ChangeKind, Stored, fold

T0 = datetime(2023, 1, 1, tzinfo=UTC)
T1 = datetime(2023, 1, 2, tzinfo=UTC)
T2 = datetime(2023, 1, 3, tzinfo=UTC)


def change(seq: int, kind: ChangeKind, at: datetime, **data: object) -> Change:
    return Change(seq=seq, transaction_id=f"tx{seq}", kind=kind, at=at, data=data or None)


def test_insert_starts_at_version_1_with_created_equal_updated() -> None:
    out = fold(Stored(), [change(1, ChangeKind.UPSERT, T1, name="Lassie")])
    assert out.final == Stored({"name": "Lassie"}, 1, T1, T1)
    assert out.effects == [(1, "inserted")]
    assert [(h.version, h.op, h.deleted) for h in out.history] == [(1, "i", False)]


def test_seed_upsert_updates_dog1_to_version_2_keeping_created() -> None:
    stored = Stored({"name": "Scooby Doo"}, 1, T0, T0)
    out = fold(stored, [change(1, ChangeKind.UPSERT, T1, name="Scooby")])
    assert out.final == Stored({"name": "Scooby"}, 2, T0, T1)
    assert out.effects == [(1, "updated")]


def test_same_data_is_unchanged_no_version_bump_no_history() -> None:
    stored = Stored({"name": "Scooby"}, 2, T0, T0)
    out = fold(stored, [change(1, ChangeKind.UPSERT, T1, name="Scooby")])
    assert out.final == stored
    assert out.effects == [(1, "unchanged")]
    assert out.history == [] and not out.changed


def test_changes_apply_in_seq_order_whatever_the_input_order() -> None:
    changes = [
        change(3, ChangeKind.UPSERT, T2, name="c"),
        change(1, ChangeKind.UPSERT, T1, name="a"),
        change(2, ChangeKind.UPSERT, T1, name="a"),
    ]
    out = fold(Stored(), changes)
    assert out.effects == [(1, "inserted"), (2, "unchanged"), (3, "updated")]
    assert out.final == Stored({"name": "c"}, 2, T1, T2)
    assert [h.version for h in out.history] == [1, 2]


def test_patch_skips_missing_ids_and_keeps_other_columns() -> None:
    assert fold(Stored(), [change(1, ChangeKind.PATCH, T1, age=6)]).effects == [(1, "skipped")]
    stored = Stored({"name": "Scooby Doo", "age": 5}, 1, T0, T0)
    patch = Change(1, "tx", ChangeKind.PATCH, T1, {"name": None, "age": 6}, columns=("age",))
    out = fold(stored, [patch])
    assert out.final == Stored({"name": "Scooby Doo", "age": 6}, 2, T0, T1)


def test_delete_writes_tombstone_and_reinsert_continues_the_version() -> None:
    stored = Stored({"name": "Clifford"}, 1, T0, T0)
    out = fold(
        stored,
        [change(1, ChangeKind.DELETE, T1), change(2, ChangeKind.UPSERT, T2, name="Clifford")],
    )
    tomb, again = out.history
    assert (tomb.version, tomb.deleted, tomb.op, dict(tomb.data)) == (
        2,
        True,
        "d",
        {"name": "Clifford"},
    )
    assert (again.version, again.op, again.created) == (3, "i", T2)
    assert out.effects == [(1, "deleted"), (2, "inserted")]


def test_insert_ignore_leaves_existing_rows() -> None:
    stored = Stored({"name": "Scooby Doo"}, 1, T0, T0)
    out = fold(stored, [change(1, ChangeKind.INSERT_IGNORE, T1, name="Scooby")])
    assert out.final == stored and out.effects == [(1, "skipped")]


def test_seed_003_delete_vasya() -> None:
    stored = Stored({"age": 30, "balance": 10}, 1, T0, T0)
    out = fold(stored, [Change(1, "tx", ChangeKind.DELETE, T1, {"age": None, "balance": None})])
    assert not out.final.live and out.effects == [(1, "deleted")]


def test_seed_003_balance_plus_100500_with_age_kept() -> None:
    stored = Stored({"age": 30, "balance": 10}, 1, T0, T0)
    write = Change(
        1,
        "tx",
        ChangeKind.UPSERT,
        T1,
        {"age": None, "balance": 100500},
        flags={"age": 1, "balance": 2},
    )
    out = fold(stored, [write])
    assert out.final.data == {"age": 30, "balance": 100510}
    assert out.final.version == 2


def test_extended_flags_on_a_new_row_missing_is_null_and_aggregate_is_the_value() -> None:
    write = Change(
        1, "tx", ChangeKind.UPSERT, T1, {"age": 5, "balance": 7}, flags={"age": 1, "balance": 2}
    )
    assert fold(Stored(), [write]).final.data == {"age": None, "balance": 7}


def test_replace_always_bumps_to_the_scope_version_keeping_the_scope_created() -> None:
    stored = Stored({"name": "Toodles"}, 1, T0, T0)
    same = Change(1, "tx", ChangeKind.REPLACE, T1, {"name": "Toodles"}, version=12, created=T0)
    out = fold(stored, [same])
    assert (out.final.version, out.final.created, out.final.updated) == (12, T0, T1)
    assert out.effects == [(1, "updated")]  # even with the same data


def test_replace_delete_tombstone_carries_the_scope_version_and_last_data() -> None:
    stored = Stored({"name": "Raffles"}, 1, T1, T1)
    out = fold(stored, [Change(1, "tx", ChangeKind.REPLACE_DELETE, T1, version=12)])
    assert not out.final.live and out.final.version == 12
    assert [(h.version, h.data, h.deleted) for h in out.history] == [
        (12, {"name": "Raffles"}, True)
    ]
