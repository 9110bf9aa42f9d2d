"""The command line (`cdc`): run, demo, status, show, results, maintain, config-reference.

See docs/architecture.md for the layers and what each owns."""
