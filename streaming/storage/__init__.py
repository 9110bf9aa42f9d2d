"""The Delta layer: table schemas, the commit identity and replay, log reads, the ledger, the
system tables, tombstones, evolution, upkeep.

See docs/architecture.md for the layers and what each owns."""
