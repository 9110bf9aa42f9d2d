"""Column formats (seed 000 "Column formats" and "Column mappings"): which source column feeds
which schema property. Pure: no Spark."""

from __future__ import annotations

import re
from enum import StrEnum

from streaming.errors import RejectedError


class ColumnFormat(StrEnum):
    AS_SPECIFIED = "AS_SPECIFIED"
    UPPER = "UPPER"
    LOWER = "LOWER"
    UPPER_SNAKE = "UPPER_SNAKE"
    LOWER_SNAKE = "LOWER_SNAKE"
    UPPER_CAMEL = "UPPER_CAMEL"
    LOWER_CAMEL = "LOWER_CAMEL"


def _words(name: str) -> list[str]:
    """myField → [my, Field]; my_field → [my, field]; HTTPServer → [HTTP, Server]."""
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", name.replace("_", " "))
    spaced = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1 \2", spaced)
    return spaced.split()


def source_name(prop: str, fmt: ColumnFormat) -> str:
    """The column name a data file uses for ``prop`` under ``fmt``."""
    words = _words(prop)
    if fmt is ColumnFormat.AS_SPECIFIED:
        return prop
    if fmt is ColumnFormat.UPPER:
        return prop.upper()
    if fmt is ColumnFormat.LOWER:
        return prop.lower()
    if fmt is ColumnFormat.UPPER_SNAKE:
        return "_".join(w.upper() for w in words)
    if fmt is ColumnFormat.LOWER_SNAKE:
        return "_".join(w.lower() for w in words)
    camel = "".join(w[:1].upper() + w[1:].lower() for w in words)
    if fmt is ColumnFormat.UPPER_CAMEL:
        return camel
    return camel[:1].lower() + camel[1:]


def _loose(name: str) -> str:
    return name.replace("_", "").lower()


def resolve_columns(
    properties: list[str],
    available: list[str],
    fmt: ColumnFormat,
    mapping: dict[str, str] | None = None,
    *,
    relaxed: bool = False,
) -> dict[str, str]:
    """property → the available column feeding it. ``mapping`` wins, then ``fmt``; ``relaxed``
    (local files) accepts any case/underscore variant that matches exactly one column.
    Properties without a column are absent from the result."""
    resolved: dict[str, str] = {}
    present = set(available)
    for prop in properties:
        wanted = (mapping or {}).get(prop)
        if wanted is not None:
            if wanted in present:
                resolved[prop] = wanted
            continue
        exact = source_name(prop, fmt)
        if exact in present:
            resolved[prop] = exact
        elif relaxed:
            matches = [c for c in available if _loose(c) == _loose(prop)]
            if len(matches) > 1:
                raise RejectedError(
                    f"columns {matches} all match property {prop!r}", code="AMBIGUOUS_COLUMN"
                )
            if matches:
                resolved[prop] = matches[0]
    return resolved
