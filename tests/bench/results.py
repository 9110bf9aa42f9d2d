"""Helpers of the bench's own tests (the text and options of `make bench`, no Spark)."""

from __future__ import annotations

from typing import Any

from bench.run import render


def rendered(work: str, entry: dict[str, Any]) -> str:
    """The benchmark's text for results holding only ``work``'s ``entry``."""
    return render({"sizes": {"name": "full"}, "machine": "2 cores", "code": "abc1234", work: entry})
