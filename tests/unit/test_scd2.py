"""SCD2 intervals from history (``core.scd2``): hand examples of each rule, a property test, and
the ``scd2`` key of dataset definitions (docs/interface.md, "SCD2 tables")."""

from __future__ import annotations

import itertools
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from streaming.core.catalog import parse_dataset
from streaming.core.errors import ConfigError
from streaming.core.scd2 import DROP, as_of, intervals, scd2_key, split_key, step

T0 = datetime(2026, 1, 1, tzinfo=UTC)
PROPS = ("name", "city", "ts")


def t(minutes: int) -> datetime:
    return T0 + timedelta(minutes=minutes)


def h(
    version: int,
    at: int,
    name: str = "a",
    city: str = "x",
    *,
    deleted: bool = False,
    ts: int | None = None,
    key: str = "k",
    tx: str | None = None,
) -> dict[str, Any]:
    return {
        "id": key,
        "version": version,
        "updated": t(at),
        "name": name,
        "city": city,
        "ts": t(ts) if ts is not None else None,
        "__deleted": deleted,
        "__transaction_id": tx or f"tx{version}",
    }


def spans(rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """(version, start, end, deleted, current, name, city) in minutes."""
    m = lambda d: None if d is None else int((d - T0).total_seconds() // 60)  # noqa: E731
    return [
        (
            r["__version"],
            m(r["__start_at"]),
            m(r["__end_at"]),
            r["__deleted"],
            r["__is_current"],
            r["name"],
            r["city"],
        )
        for r in rows
    ]


def test_first_version_opens_an_interval() -> None:
    assert spans(intervals([h(1, 0)], PROPS, ["name", "city"])) == [
        (1, 0, None, False, True, "a", "x")
    ]


def test_a_tracked_change_closes_and_opens() -> None:
    rows = intervals([h(1, 0), h(2, 5, "b")], PROPS, ["name"])
    assert spans(rows) == [(1, 0, 5, False, False, "a", "x"), (2, 5, None, False, True, "b", "x")]
    assert rows[1]["__transaction_id"] == "tx2"


def test_an_untracked_change_updates_the_open_interval_in_place() -> None:
    rows = intervals([h(1, 0), h(2, 5, city="y"), h(3, 7, "b", "y")], PROPS, ["name"])
    assert spans(rows) == [(1, 0, 7, False, False, "a", "y"), (3, 7, None, False, True, "b", "y")]
    assert rows[0]["__transaction_id"] == "tx1"


def test_a_delete_closes_and_a_reinsert_opens_again() -> None:
    rows = intervals(
        [h(1, 0), h(2, 5, deleted=True), h(3, 9), h(4, 12, deleted=True)], PROPS, ["name"]
    )
    assert spans(rows) == [(1, 0, 5, True, False, "a", "x"), (3, 9, 12, True, False, "a", "x")]


def test_same_time_versions_keep_only_the_last() -> None:
    rows = intervals([h(1, 0), h(2, 0, "b"), h(3, 0, "c"), h(4, 4, "d")], PROPS, ["name"])
    assert spans(rows) == [(3, 0, 4, False, False, "c", "x"), (4, 4, None, False, True, "d", "x")]


def test_insert_and_delete_at_one_time_leave_no_interval() -> None:
    assert intervals([h(1, 0), h(2, 0, deleted=True)], PROPS, ["name"]) == []


def test_a_collapsed_interval_before_a_delete_marks_its_predecessor_deleted() -> None:
    rows = intervals([h(1, 0), h(2, 5, "b"), h(3, 5, deleted=True)], PROPS, ["name"])
    assert spans(rows) == [(1, 0, 5, True, False, "a", "x")]


def test_a_reinsert_at_the_delete_time_keeps_the_row_alive() -> None:
    rows = intervals([h(1, 0), h(2, 5, deleted=True), h(3, 5, "b")], PROPS, ["name"])
    assert spans(rows) == [(1, 0, 5, False, False, "a", "x"), (3, 5, None, False, True, "b", "x")]


def test_valid_from_is_made_non_decreasing() -> None:
    rows = intervals(
        [h(1, 0, ts=10), h(2, 1, "b", ts=30), h(3, 2, "c", ts=20), h(4, 3, "d", ts=40)],
        PROPS,
        ["name"],
        "ts",
    )
    # version 3 (ts 20 < 30) is lifted to 30: version 2's interval is empty and dropped
    assert spans(rows) == [
        (1, 10, 30, False, False, "a", "x"),
        (3, 30, 40, False, False, "c", "x"),
        (4, 40, None, False, True, "d", "x"),
    ]


def test_a_delete_takes_its_commit_time_even_with_valid_from() -> None:
    rows = intervals([h(1, 100, ts=10), h(2, 200, deleted=True, ts=10)], PROPS, ["name"], "ts")
    assert spans(rows) == [(1, 10, 200, True, False, "a", "x")]


def test_a_null_valid_from_falls_back_to_updated() -> None:
    rows = intervals([h(1, 3, ts=None)], PROPS, ["name"], "ts")
    assert spans(rows)[0][1] == 3


def test_as_of_picks_the_interval_valid_at_a_time() -> None:
    rows = intervals([h(1, 0), h(2, 5, "b"), h(3, 9, deleted=True)], PROPS, ["name"])
    assert [r["name"] for r in as_of(rows, t(0))] == ["a"]
    assert [r["name"] for r in as_of(rows, t(5))] == ["b"]
    assert as_of(rows, t(9)) == [] and as_of(rows, t(-1)) == []


def test_ledger_keys_of_scd2_tables() -> None:
    assert split_key(scd2_key("shop.Customer")) == ("shop.Customer", True)
    assert split_key("shop.Customer") == ("shop.Customer", False)


# -- property test ------------------------------------------------------------------------------
@st.composite
def histories(draw: st.DrawFn, past: bool = False) -> tuple[list[dict[str, Any]], bool]:
    """Complete histories of a few ids: versions 1.. with deletes never twice in a row;
    ``past``: each ``valid_from`` (``ts``) given, before its version's commit time, as a
    source's commit time is before ours. (Else an id inserted and deleted at one time leaves no
    interval, and the SCD2 table no trace of that time: a later version of it with an earlier
    time is not lifted to it by the batch step, as it is by the reference — see
    docs/interface.md, "SCD2 tables".)"""
    use_valid_from = draw(st.booleans())
    rows: list[dict[str, Any]] = []
    for key in ("a", "b", "c")[: draw(st.integers(1, 3))]:
        at, live, version = 0, False, 0
        for _ in range(draw(st.integers(1, 8))):
            at += draw(st.integers(0, 2))
            version += draw(st.integers(1, 3))
            delete = live and draw(st.booleans())
            rows.append(
                h(
                    version,
                    at,
                    draw(st.sampled_from("pq")),
                    draw(st.sampled_from("xy")),
                    deleted=delete,
                    ts=(
                        (at - draw(st.integers(1, 6)) if past else draw(st.integers(0, 20)))
                        if use_valid_from and (past or draw(st.integers(0, 5)))
                        else None
                    ),
                    key=key,
                )
            )
            live = not delete
    return rows, use_valid_from


@settings(max_examples=300, deadline=None)
@given(histories(), st.sampled_from([["name"], ["name", "city"], []]))
def test_intervals_tile_the_rows_life(
    drawn: tuple[list[dict[str, Any]], bool], track: list[str]
) -> None:
    history, use_valid_from = drawn
    out = intervals(history, PROPS, track, "ts" if use_valid_from else None)
    by_id: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in out:
        by_id[r["id"]].append(r)
    for key, rows in by_id.items():
        for r in rows:
            assert r["__end_at"] is None or r["__start_at"] < r["__end_at"]
            assert r["__is_current"] == (r["__end_at"] is None)
        for a, b in itertools.pairwise(rows):
            assert a["__end_at"] is not None and a["__end_at"] <= b["__start_at"]  # no overlap
            if not a["__deleted"]:  # no gap while the row exists
                assert a["__end_at"] == b["__start_at"]
        assert sum(r["__is_current"] for r in rows) <= 1
        last = max((r for r in history if r["id"] == key), key=lambda r: r["version"])
        current = [r for r in rows if r["__is_current"]]
        if last["__deleted"]:
            assert not current and rows[-1]["__deleted"]
        else:  # the open interval holds the last live version's values
            assert current and all(current[0][p] == last[p] for p in PROPS)
    for key in {r["id"] for r in history} - set(by_id):
        assert max((r for r in history if r["id"] == key), key=lambda r: r["version"])["__deleted"]


# -- dataset definitions ------------------------------------------------------------------------
BASE = "p.C: {properties: {a: {type: string}, b: {type: string}, ts: {type: datetime}}, "


def schema(text: str) -> Any:
    return parse_dataset("p", yaml.safe_load(text)).schemas["p.C"]


@pytest.mark.parametrize(
    ("extra", "track", "valid_from"),
    [
        ("scd2: true", ["a", "b", "ts"], None),
        ("scd2: true, watermark: [ts]", ["a", "b"], None),
        ("scd2: [a]", ["a"], None),
        ("scd2: {valid_from: ts}", ["a", "b"], "ts"),
        ("scd2: {track: [b, a]}", ["a", "b"], None),
    ],
)
def test_scd2_definitions(extra: str, track: list[str], valid_from: str | None) -> None:
    s = schema(BASE + extra + "}")
    assert s.scd2_tracked() == track and s.scd2.valid_from == valid_from


def test_scd2_is_off_by_default() -> None:
    assert schema(BASE + "}").scd2 is None and schema(BASE + "scd2: false}").scd2 is None


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ("scd2: true, history: false", "p.C.scd2: needs the schema's history"),
        ("scd2: [x]", "p.C.scd2.track: 'x' is not a property of p.C"),
        ("scd2: [a, a]", "p.C.scd2.track: a property is listed twice"),
        ("scd2: {valid_from: a}", "p.C.scd2.valid_from: 'a' is a string, not a datetime"),
        ("scd2: {valid_from: nope}", "p.C.scd2.valid_from: 'nope' is not a property"),
        ("scd2: {trak: [a]}", "p.C.scd2.trak: unknown key"),
        ("scd2: 3", "p.C.scd2: Input should be"),
    ],
)
def test_wrong_scd2_definitions_name_the_key(extra: str, expected: str) -> None:
    with pytest.raises(ConfigError) as e:
        schema(BASE + extra + "}")
    assert expected in str(e.value)


def test_scd2_is_only_for_objects() -> None:
    with pytest.raises(ConfigError, match=r"p\.R\.scd2: only object schemas"):
        parse_dataset(
            "p", yaml.safe_load("p.R: {type: record, properties: {a: {type: string}}, scd2: true}")
        )


# -- the batch step (``core.scd2.step``) over the seeds ``apply.scd2`` reads ---------------------
def _stored(table: list[dict[str, Any]], key: str) -> list[dict[str, Any]]:
    """The seed read of ``apply.scd2`` (``_kept``), in Python: an id's open interval and the
    closed one ending where it starts, or (no open one) its last one."""
    mine = [r for r in table if r["id"] == key]
    open_ = [r for r in mine if r["__end_at"] is None]
    closed = [r for r in mine if r["__end_at"] is not None]
    last = max(closed, key=lambda r: r["__end_at"]) if closed else None
    if last is not None and open_ and last["__end_at"] != open_[0]["__start_at"]:
        last = None
    return [*([last] if last is not None else []), *open_]


def _seeded_step(
    table: list[dict[str, Any]],
    batch: list[dict[str, Any]],
    track: list[str],
    valid_from: str | None,
) -> list[dict[str, Any]]:
    """The table after one batch: ``step`` over the seeds, then the MERGE by (id, __version)
    (a DROP row deletes its match, others replace it or are inserted)."""
    stored = [r for key in {r["id"] for r in batch} for r in _stored(table, key)]
    rows = step(stored, batch, PROPS, track, valid_from)
    key = lambda r: (r["id"], r["__version"])  # noqa: E731
    out = {key(r): r for r in table}
    for r in rows:
        interval = {c: v for c, v in r.items() if c != DROP}
        if r[DROP]:
            del out[key(r)]
        else:
            assert interval not in table  # an interval written as it is stored is left out
            out[key(r)] = interval
    return list(out.values())


@settings(max_examples=300, deadline=None)
@given(histories(past=True), st.sampled_from([["name"], ["name", "city"], []]), st.integers(1, 4))
def test_batch_steps_over_seeds_equal_the_reference_over_everything(
    drawn: tuple[list[dict[str, Any]], bool], track: list[str], cuts: int
) -> None:
    history, use_valid_from = drawn
    valid_from = "ts" if use_valid_from else None
    ordered = sorted(history, key=lambda r: (r["updated"], r["version"]))
    # batches in commit-time order (a batch's versions of an id are consecutive)
    times = sorted({r["updated"] for r in ordered})
    bounds = [times[len(times) * n // cuts] for n in range(1, cuts)] if len(times) > 1 else []
    table: list[dict[str, Any]] = []
    done: list[dict[str, Any]] = []
    for lower, upper in zip([None, *bounds], [*bounds, None], strict=True):
        batch = [
            r
            for r in ordered
            if (lower is None or r["updated"] >= lower) and (upper is None or r["updated"] < upper)
        ]
        if not batch:
            continue
        done += batch
        table = _seeded_step(table, batch, track, valid_from)
        key = lambda r: (r["id"], r["__version"])  # noqa: E731
        assert sorted(table, key=key) == sorted(intervals(done, PROPS, track, valid_from), key=key)


def test_committed_outcomes_get_the_scd2_tables_versions() -> None:
    from streaming.core.outcomes import Outcome, Status
    from streaming.core.results import with_scd2_versions

    def outcome(status: Status, versions: dict[str, int]) -> Outcome:
        return Outcome(
            transaction_id="t",
            dataset="shop",
            status=status,
            batch_id=3,
            source="s",
            tableVersions=versions,
        )

    done = outcome(Status.COMMITTED, {"shop.Customer": 7, "shop.Order": 2})
    failed = outcome(Status.FAILED, {})
    with_scd2_versions([done, failed], {("shop", "shop.Customer"): 4, ("other", "shop.Order"): 9})
    assert done.table_versions == {"shop.Customer": 7, "shop.Order": 2, "shop.Customer#scd2": 4}
    assert failed.table_versions == {}


def test_a_batch_step_closes_the_stored_open_interval_and_opens_the_next() -> None:
    (stored,) = intervals([h(1, 0, "p")], PROPS, ["name"])
    rows = step([stored], [h(2, 5, "q"), h(3, 5, "q", "y")], PROPS, ["name"])
    assert [(r["__version"], r[DROP]) for r in rows] == [(1, False), (2, False)]
    closed, opened = rows
    assert (closed["__end_at"], closed["__is_current"], closed["__deleted"]) == (t(5), False, False)
    assert (opened["__start_at"], opened["name"], opened["city"]) == (t(5), "q", "y")  # type 1


def test_a_batch_step_drops_an_interval_it_empties_and_leaves_the_unchanged_one_out() -> None:
    stored = intervals([h(1, 0, "p"), h(2, 5, "q")], PROPS, ["name"])  # [0, 5) p, [5, -) q
    rows = step(stored, [h(3, 5, deleted=True)], PROPS, ["name"])  # deleted at 5 (one time)
    assert [(r["__version"], r[DROP]) for r in rows] == [(1, False), (2, True)]
    assert (rows[0]["__end_at"], rows[0]["__deleted"]) == (t(5), True)  # ends with the delete
    assert step(stored[1:], [h(3, 5, "q", "y")], PROPS, ["name"])[0]["city"] == "y"
