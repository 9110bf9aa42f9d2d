"""Applying change rows: object tables (fold + MERGE), the SQL fold, record tables and views.

See docs/architecture.md for the layers and what each owns."""
