"""SCD type 2 intervals from an object's history: the pure reference (docs/interface.md, "SCD2").

``intervals`` turns one table's complete history rows (dicts as the history table holds them:
``id``, ``version``, ``updated``, ``__deleted``, ``__transaction_id`` and the properties) into
the rows of its SCD2 table. The Spark code that maintains the table batch by batch
(``streaming.apply.scd2``) must give exactly this; the tests hold it to it. ``step`` is the same
rules applied to one batch from the stored intervals it can change: the rows to write and to
delete (``apply.scd2``'s path for batches folded on the driver).

Per id, the versions in version order:

- a version's *validity time* is its ``valid_from`` value (NULL or no ``valid_from``: its
  ``updated``, the commit time); a delete's is always its ``updated`` (a history tombstone
  carries the last data, not a time of the delete);
- a *boundary* is a version that opens an interval — the first version, a re-insert after a
  delete, a version whose tracked values differ from the previous version's — or a delete;
  other versions change only untracked properties and update the open interval's values in
  place (type 1), keeping its start, ``__version`` and ``__transaction_id``;
- boundary times are made non-decreasing per id: a boundary's time is the largest validity
  time of the boundaries up to it (type-1 versions move no boundary, so their times do not
  count);
- a boundary's interval runs from its time to the next boundary's time (NULL: open); one that
  would be empty (the next boundary has the same time) is dropped: of several versions at one
  time only the last one's interval survives;
- ``__deleted``: the interval is closed and the row was deleted at its end (the last boundary
  at that time is a delete, so no interval starts there); ``__is_current``: it is open.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

__all__ = [
    "COLUMNS",
    "CURRENT",
    "DELETED",
    "DROP",
    "END",
    "START",
    "SUFFIX",
    "TRANSACTION",
    "VERSION",
    "Segment",
    "as_of",
    "intervals",
    "scd2_key",
    "split_key",
    "step",
    "validity_time",
]

START, END, CURRENT, DELETED, TRANSACTION, VERSION = (
    "__start_at",
    "__end_at",
    "__is_current",
    "__deleted",
    "__transaction_id",
    "__version",
)
COLUMNS = (START, END, CURRENT, DELETED, TRANSACTION, VERSION)
"""The SCD2 table's own columns, after ``id`` and the properties."""
SUFFIX = "#scd2"
"""A ledger ``table_versions`` key ``<schema>#scd2``: the version of the schema's SCD2 table
(``storage.consistent``); plain keys stay the current tables'."""


def scd2_key(schema: str) -> str:
    return schema + SUFFIX


def split_key(key: str) -> tuple[str, bool]:
    """A ``table_versions`` key → (schema name, whether it is the SCD2 table's)."""
    if key.endswith(SUFFIX):
        return key[: -len(SUFFIX)], True
    return key, False


@dataclass(frozen=True)
class Segment:
    """A boundary and the versions up to the next one (``intervals``)."""

    start: datetime
    opens: bool
    """False: a delete (a span without the row)."""
    version: int
    transaction_id: str
    values: Mapping[str, Any]


def validity_time(row: Mapping[str, Any], valid_from: str | None) -> datetime:
    """A history row's validity time (the module's rules)."""
    if valid_from is None or row["__deleted"] or row.get(valid_from) is None:
        return row["updated"]  # type: ignore[no-any-return]
    return row[valid_from]  # type: ignore[no-any-return]


def intervals(
    history: Iterable[Mapping[str, Any]],
    properties: Sequence[str],
    track: Sequence[str],
    valid_from: str | None = None,
) -> list[dict[str, Any]]:
    """The SCD2 rows of one table's complete ``history`` (``properties``: its data columns;
    ``track``: the tracked ones), ordered by (id, start)."""
    by_id: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for row in history:
        by_id[row["id"]].append(row)
    out: list[dict[str, Any]] = []
    for key in sorted(by_id):
        rows = sorted(by_id[key], key=lambda r: r["version"])
        entries = [_Entry(r, validity_time(r, valid_from)) for r in rows]
        out.extend(_of_id(key, entries, properties, track))
    return out


DROP = "__drop"
"""``step``'s rows: True for a stored interval that no longer exists (to be deleted)."""


def step(
    stored: Iterable[Mapping[str, Any]],
    history: Iterable[Mapping[str, Any]],
    properties: Sequence[str],
    track: Sequence[str],
    valid_from: str | None = None,
) -> list[dict[str, Any]]:
    """One batch's change to an SCD2 table: the rows to write (``DROP`` False: insert or
    update by ``(id, __version)``) and to delete (``DROP`` True).

    ``history``: the batch's history rows (every version of the batch, of any ids);
    ``stored``: the SCD2 rows of those ids the batch can change — each id's open interval and
    the closed one that ends where it starts, or (a deleted row) its last interval
    (``apply.scd2``'s seed read). The rows equal what ``intervals`` gives over the complete
    history from those intervals on; an interval written as it is stored is left out."""
    by_id: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for row in history:
        by_id[row["id"]].append(row)
    known: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for row in stored:
        known[row["id"]].append(row)
    out: list[dict[str, Any]] = []
    for key in sorted(by_id):
        seeds = sorted(known.get(key, []), key=lambda r: r[START])
        entries = [
            *_seed_entries(seeds),
            *(
                _Entry(r, validity_time(r, valid_from))
                for r in sorted(by_id[key], key=lambda r: r["version"])
            ),
        ]
        now = {r[VERSION]: r for r in _of_id(key, entries, properties, track)}
        before = {r[VERSION]: r for r in seeds}
        for version, row in now.items():
            if before.get(version) != row:
                out.append({**row, DROP: False})
        out.extend({**r, DROP: True} for v, r in before.items() if v not in now)
    return out


@dataclass(frozen=True)
class _Entry:
    """A version of an id (a history row) at its validity time, or a stored interval's start
    or end (``seed``: always a boundary, as it was when the interval was written)."""

    row: Mapping[str, Any]
    at: datetime
    seed: bool = False
    deleted: bool = False


def _seed_entries(seeds: Sequence[Mapping[str, Any]]) -> list[_Entry]:
    """Stored intervals (ordered by start) as boundaries: each one's start, and the end of a
    closed one when no interval is open (the row was deleted there)."""

    def row(interval: Mapping[str, Any]) -> dict[str, Any]:
        return {
            **interval,
            "version": interval[VERSION],
            "__transaction_id": interval[TRANSACTION],
        }

    out = [_Entry(row(s), s[START], seed=True) for s in seeds]
    if seeds and seeds[-1][END] is not None:
        out.append(_Entry(row(seeds[-1]), seeds[-1][END], seed=True, deleted=True))
    return out


def _of_id(
    key: str,
    entries: Sequence[_Entry],
    properties: Sequence[str],
    track: Sequence[str],
) -> list[dict[str, Any]]:
    segments: list[Segment] = []
    before: Mapping[str, Any] | None = None
    before_deleted = False
    high: datetime | None = None
    for entry in entries:
        row = entry.row
        values = {p: row.get(p) for p in properties}
        deleted = entry.deleted or (not entry.seed and bool(row["__deleted"]))
        if deleted:
            opens, boundary = False, True
        else:
            boundary = (
                entry.seed
                or before is None
                or before_deleted
                or any(row.get(p) != before.get(p) for p in track)
            )
            opens = True
        before, before_deleted = row, deleted
        if not boundary:  # type 1: the open interval takes the version's values
            segments[-1] = replace(segments[-1], values=values)
            continue
        high = entry.at if high is None or entry.at > high else high
        segments.append(Segment(high, opens, row["version"], row["__transaction_id"], values))
    out: list[dict[str, Any]] = []
    for i, segment in enumerate(segments):
        if not segment.opens:
            continue
        end = segments[i + 1].start if i + 1 < len(segments) else None
        if end is not None and end <= segment.start:
            continue  # empty: a later boundary at the same time wins
        deleted = False
        if end is not None:  # the last boundary at ``end`` says whether the row lives on
            last = [s for s in segments if s.start == end][-1]
            deleted = not last.opens
        out.append(
            {
                "id": key,
                **segment.values,
                START: segment.start,
                END: end,
                CURRENT: end is None,
                DELETED: deleted,
                TRANSACTION: segment.transaction_id,
                VERSION: segment.version,
            }
        )
    return out


def as_of(rows: Iterable[Mapping[str, Any]], at: datetime) -> list[Mapping[str, Any]]:
    """The SCD2 rows valid at ``at``: started at or before it and not ended by then."""
    return [r for r in rows if r[START] <= at and (r[END] is None or r[END] > at)]
