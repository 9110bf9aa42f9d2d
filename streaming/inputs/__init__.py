"""Reading inputs: the data a planned action points to, read into change rows and checked.

See docs/architecture.md for the layers and what each owns."""
