"""Column formats (seed 000 "Column formats" and "Column mappings"): which source column feeds
which schema property. Pure: no Spark."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from enum import StrEnum

from streaming.core.codes import Code
from streaming.core.errors import RejectedError

__all__ = ["ColumnFormat", "loose", "resolve_columns", "source_name"]


class ColumnFormat(StrEnum):
    """How a data file spells the schema's property ``myField``."""

    AS_SPECIFIED = "AS_SPECIFIED"  # myField
    UPPER = "UPPER"  # MYFIELD
    LOWER = "LOWER"  # myfield
    UPPER_SNAKE = "UPPER_SNAKE"  # MY_FIELD
    LOWER_SNAKE = "LOWER_SNAKE"  # my_field
    UPPER_CAMEL = "UPPER_CAMEL"  # MyField
    LOWER_CAMEL = "LOWER_CAMEL"  # myField


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


def loose(name: str) -> str:
    """The spelling every case and snake/camel variant of a name shares."""
    return name.replace("_", "").lower()


def _loose_match(prop: str, wanted: str, available: Sequence[str]) -> str | None:
    matches = [c for c in available if loose(c) == loose(wanted)]
    if len(matches) > 1:
        raise RejectedError(
            f"columns {matches} all match property {prop!r}", code=Code.AMBIGUOUS_COLUMN
        )
    return matches[0] if matches else None


def resolve_columns(
    properties: Sequence[str],
    available: Sequence[str],
    fmt: ColumnFormat,
    mapping: Mapping[str, str] | None = None,
    *,
    relaxed: bool = False,
) -> dict[str, str]:
    """property → the available column feeding it: the ``mapping``'s column if given, else the
    ``fmt`` spelling. ``relaxed`` (local files) also accepts the one column equal to it ignoring
    case and underscores; several such columns are ambiguous (AMBIGUOUS_COLUMN).
    Properties without a column are absent from the result."""
    resolved: dict[str, str] = {}
    present = set(available)
    for prop in properties:
        wanted = (mapping or {}).get(prop) or source_name(prop, fmt)
        column = wanted if wanted in present else None
        if column is None and relaxed:
            column = _loose_match(prop, wanted, available)
        if column is not None:
            resolved[prop] = column
    return resolved
