"""The job's wiring: the SparkSession, the foreachBatch sink, the streaming query, logging,
observation.

See docs/architecture.md for the layers and what each owns."""
