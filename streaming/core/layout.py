"""Where everything lives: table paths, checkpoint paths and query names, in one place.

The storage layout is a public interface (README "Storage layout"): readers outside this project
open these paths directly.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["CURRENT_FILE_MIB", "Layout", "ObjectTable"]

CURRENT_FILE_MIB = 32
"""The file size ``cdc maintain`` aims at in current tables. Delta's default (1 GB) suits tables
that are only appended to; a MERGE that changes one key of a file rewrites all of it."""


def _join(root: str, *parts: str) -> str:
    return "/".join([root.rstrip("/"), *parts])


@dataclass(frozen=True)
class ObjectTable:
    """The Delta tables behind one object schema."""

    current: str
    history: str
    tombstones: str
    scd2: str | None = None
    """The SCD2 table (``Layout.scd2``) when the schema keeps one; derived from history, so not
    restorable either: a batch's MERGE of it is made once, with the history append."""

    @property
    def derived(self) -> tuple[str, ...]:
        """The tables written with the ledger, never restored: history (and SCD2)."""
        return (self.history,) if self.scd2 is None else (self.history, self.scd2)

    @property
    def restorable(self) -> tuple[str, str]:
        """The tables a failed batch restores (history is append-only: rolled forward only)."""
        return (self.current, self.tombstones)


@dataclass(frozen=True)
class Layout:
    warehouse: str
    checkpoints: str
    query_name: str = "cdc"

    # -- dataset tables ----------------------------------------------------------------------
    def table(self, dataset: str, schema_fqn: str) -> str:
        """Current-state table: ``<warehouse>/<dataset>/<schema, dots → slashes>``."""
        return _join(self.warehouse, dataset, *schema_fqn.split("."))

    def history(self, dataset: str, schema_fqn: str) -> str:
        """Append-only version history: ``<warehouse>/<dataset>/_history/<schema path>``."""
        return _join(self.warehouse, dataset, "_history", *schema_fqn.split("."))

    def tombstones(self, dataset: str, schema_fqn: str) -> str:
        """Deleted keys remembered (id, version): ``<dataset>/_tombstones/<schema path>``."""
        return _join(self.warehouse, dataset, "_tombstones", *schema_fqn.split("."))

    def scd2(self, dataset: str, schema_fqn: str) -> str:
        """SCD type 2 intervals (``scd2:`` schemas): ``<dataset>/_scd2/<schema path>``."""
        return _join(self.warehouse, dataset, "_scd2", *schema_fqn.split("."))

    def object_table(self, dataset: str, schema_fqn: str, *, scd2: bool = False) -> ObjectTable:
        return ObjectTable(
            self.table(dataset, schema_fqn),
            self.history(dataset, schema_fqn),
            self.tombstones(dataset, schema_fqn),
            self.scd2(dataset, schema_fqn) if scd2 else None,
        )

    # -- system tables -----------------------------------------------------------------------
    @property
    def ledger(self) -> str:
        return _join(self.warehouse, "_system", "transactions")

    @property
    def outcomes(self) -> str:
        return _join(self.warehouse, "_system", "outcomes")

    @property
    def quarantine(self) -> str:
        return _join(self.warehouse, "_system", "quarantine")

    @property
    def pending(self) -> str:
        """Change-feed records of source transactions not applied yet (``storage.pending``)."""
        return _join(self.warehouse, "_system", "pending")

    @property
    def evolved(self) -> str:
        """Properties the change feeds added to the schemas (``storage.evolved``)."""
        return _join(self.warehouse, "_system", "evolved_properties")

    # -- streaming ---------------------------------------------------------------------------
    @property
    def checkpoint(self) -> str:
        return _join(self.checkpoints, self.query_name)
