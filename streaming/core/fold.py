"""Row versioning as a pure fold: the stored state of one key + its ordered changes → new state.

This is the single definition of what a change does to a row (docs/architecture.md,
"Versions"). The micro-batch path runs it once per key over all the batch's changes to that key,
in source order, so applying many transactions together gives exactly what applying them one at a
time gives.

- insert: version = previous version + 1 (1 for a new key; tombstone version + 1 for a key that was
  deleted, so (id, version) stays unique in history), created = updated = commit time.
- a change that alters the data: version + 1, updated = commit time, created kept.
- a change that alters nothing: ``unchanged`` — no version bump, no history row.
- PATCH only updates existing rows, and only the columns its source has; absent ids are ``skipped``.
- INSERT_IGNORE leaves existing rows alone (``skipped``).
- DELETE removes the row and writes a tombstone history entry with the last data and version + 1.
- REPLACE (seed 000) writes with a version and created time decided for its whole scope: a
  ``REPLACE`` change always bumps to ``change.version`` (even when the data is the same), keeps
  ``change.created``; a ``REPLACE_DELETE`` removes a row of the scope the source lacks, with a
  tombstone at ``change.version``.
- Watermarks (seed 001), when the schema has watermark columns: per key the largest watermark
  wins; NULL is the smallest value; composite watermarks compare left to right. A change whose
  watermark is older than the key's (live row or tombstone) is ``stale`` and ignored; on a tie the
  later change (in source order) wins. A delete keeps its watermark on the tombstone, so a late,
  older update cannot resurrect the key — also a delete of a key that is not live (``skipped``:
  nothing to delete): a newer watermark than the key's moves its tombstone (the key's version,
  0 for a key never seen) forward, without a history row.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any, Literal

__all__ = [
    "AGGREGATE",
    "EFFECTS",
    "FLAGS",
    "MISSING",
    "Change",
    "ChangeKind",
    "Effect",
    "Folded",
    "HistoryEntry",
    "Stored",
    "Watermark",
    "apply_change",
    "fold",
    "watermark_key",
]

Effect = Literal["inserted", "updated", "deleted", "unchanged", "skipped", "stale"]
EFFECTS: tuple[Effect, ...] = ("inserted", "updated", "deleted", "unchanged", "skipped", "stale")

Watermark = tuple[Any, ...]


def watermark_key(value: Watermark) -> tuple[tuple[bool, Any], ...]:
    """Sort key of a watermark: left to right, NULL smaller than any value."""
    return tuple((v is not None, v) for v in value)


class ChangeKind(StrEnum):
    UPSERT = "UPSERT"
    PATCH = "PATCH"
    DELETE = "DELETE"
    INSERT_IGNORE = "INSERT_IGNORE"
    REPLACE = "REPLACE"
    REPLACE_DELETE = "REPLACE_DELETE"


@dataclass(frozen=True)
class Stored:
    """A key's state: a live row (``data`` set) or none (``data`` None).

    ``version`` is the live row's version, or for a deleted key its tombstone version
    (0 = the key was never seen).
    """

    data: Mapping[str, Any] | None = None
    version: int = 0
    created: datetime | None = None
    updated: datetime | None = None
    watermark: Watermark | None = None
    """The watermark of the live row or tombstone (None: the schema has none, or never seen)."""

    @property
    def live(self) -> bool:
        return self.data is not None


@dataclass(frozen=True)
class Change:
    """One change to one key, at position ``seq`` in source order."""

    seq: int
    transaction_id: str
    kind: ChangeKind
    at: datetime
    data: Mapping[str, Any] | None = None
    columns: tuple[str, ...] | None = None
    """PATCH: the columns the source carries (None = every column of ``data``)."""
    watermark: Watermark | None = None
    flags: Mapping[str, int] | None = None
    """Extended format (seed 003) per column: bit 1 Missing = keep the stored value,
    bit 2 Aggregate = add to the stored value; 0 or absent = overwrite."""
    version: int | None = None
    """REPLACE / REPLACE_DELETE: the version the whole scope moves to."""
    created: datetime | None = None
    """REPLACE: the created time of the scope (its minimum; None = the commit time)."""


@dataclass(frozen=True)
class HistoryEntry:
    data: Mapping[str, Any]
    version: int
    created: datetime
    updated: datetime
    deleted: bool
    op: Literal["i", "u", "d"]
    transaction_id: str


@dataclass(frozen=True)
class Folded:
    final: Stored
    history: list[HistoryEntry] = field(default_factory=list)
    effects: list[tuple[int, Effect]] = field(default_factory=list)
    """(change seq, effect) for every change, in order."""
    moved: bool = False
    """A delete of a key not live moved its tombstone's watermark forward."""

    @property
    def changed(self) -> bool:
        """True when the stored state must be written: something was inserted/updated/deleted,
        or a tombstone's watermark moved."""
        return bool(self.history) or self.moved


def _entry(state: Stored, change: Change, op: Literal["i", "u", "d"]) -> HistoryEntry:
    assert state.data is not None and state.created is not None and state.updated is not None
    return HistoryEntry(
        data=state.data,
        version=state.version,
        created=state.created,
        updated=state.updated,
        deleted=op == "d",
        op=op,
        transaction_id=change.transaction_id,
    )


def _write(state: Stored, change: Change, data: Mapping[str, Any]) -> tuple[Stored, Effect]:
    """Write ``data`` over ``state``: insert, update, or nothing when the data is the same."""
    mark = change.watermark if change.watermark is not None else state.watermark
    if state.data is None:
        return Stored(dict(data), state.version + 1, change.at, change.at, mark), "inserted"
    if dict(state.data) == dict(data):
        return state, "unchanged"
    return Stored(dict(data), state.version + 1, state.created, change.at, mark), "updated"


MISSING, AGGREGATE = 1, 2
FLAGS = "$flags:"
"""The column prefix of a value's flags: the extended format's ``$flags:<property>`` (seed 003),
a change feed's staged ``$flags:<column>`` (``core.changefeed``)."""


def _with_flags(state: Stored, data: Mapping[str, Any], flags: Mapping[str, int]) -> dict[str, Any]:
    """The row an extended-format write produces over ``state`` (seed 003)."""
    stored = state.data or {}
    out = dict(data)
    for column, flag in flags.items():
        if flag & MISSING:
            out[column] = stored.get(column)
        elif flag & AGGREGATE:
            old, add = stored.get(column), data.get(column)
            out[column] = old if add is None else add if old is None else old + add
    return out


def _stale(state: Stored, change: Change) -> bool:
    if change.watermark is None or state.watermark is None:
        return False
    return watermark_key(change.watermark) < watermark_key(state.watermark)


def apply_change(state: Stored, change: Change) -> tuple[Stored, Effect]:
    """The state after one change, and what the change did."""
    if _stale(state, change):
        return state, "stale"
    if change.kind is ChangeKind.REPLACE:
        assert change.version is not None
        created = change.created or change.at
        new = Stored(dict(change.data or {}), change.version, created, change.at, change.watermark)
        return new, "updated" if state.live else "inserted"
    if change.kind in (ChangeKind.DELETE, ChangeKind.REPLACE_DELETE):
        if state.data is None:
            if change.watermark is None or (
                state.watermark is not None
                and watermark_key(change.watermark) <= watermark_key(state.watermark)
            ):
                return state, "skipped"
            # Nothing to delete, but the key's freshest row is this delete: keep its watermark.
            return Stored(None, state.version, state.created, change.at, change.watermark), (
                "skipped"
            )
        mark = change.watermark if change.watermark is not None else state.watermark
        version = change.version if change.version is not None else state.version + 1
        return Stored(None, version, state.created, change.at, mark), "deleted"
    data = change.data or {}
    if change.flags:
        data = _with_flags(state, data, change.flags)
    if change.kind is ChangeKind.UPSERT:
        return _write(state, change, data)
    if change.kind is ChangeKind.INSERT_IGNORE:
        return (state, "skipped") if state.live else _write(state, change, data)
    # PATCH
    if state.data is None:
        return state, "skipped"
    columns = change.columns if change.columns is not None else tuple(data)
    return _write(state, change, {**state.data, **{c: data.get(c) for c in columns}})


def fold(stored: Stored, changes: Sequence[Change]) -> Folded:
    """Apply ``changes`` (any order; they are sorted by ``seq``) to ``stored``."""
    state = stored
    history: list[HistoryEntry] = []
    effects: list[tuple[int, Effect]] = []
    moved = False
    for change in sorted(changes, key=lambda c: c.seq):
        before = state
        state, effect = apply_change(state, change)
        effects.append((change.seq, effect))
        moved = moved or (effect == "skipped" and state is not before)
        if effect == "inserted":
            history.append(_entry(state, change, "i"))
        elif effect == "updated":
            history.append(_entry(state, change, "u"))
        elif effect == "deleted":
            # The tombstone carries the last data, the new version and the deletion time.
            last = Stored(before.data, state.version, before.created, change.at)
            history.append(_entry(last, change, "d"))
    return Folded(state, history, effects, moved)
