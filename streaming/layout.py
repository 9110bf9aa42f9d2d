"""Where everything lives: table paths, checkpoint paths and query names, in one place.

The storage layout is a public interface (README "Storage layout"): readers outside this project
open these paths directly.
"""

from __future__ import annotations

from dataclasses import dataclass


def _join(root: str, *parts: str) -> str:
    return "/".join([root.rstrip("/"), *parts])


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
        """Deleted keys remembered (id, version, watermark): ``<dataset>/_tombstones/<path>``."""
        return _join(self.warehouse, dataset, "_tombstones", *schema_fqn.split("."))

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

    # -- streaming ---------------------------------------------------------------------------
    @property
    def checkpoint(self) -> str:
        return _join(self.checkpoints, self.query_name)
