"""The pure core: requests, dataset definitions, planning, ordering, the fold. No Spark, no I/O.

See docs/architecture.md for the layers and what each owns."""
