"""Parsed expressions (``core.expressions``) as Spark Columns: the filters of named queries.

A name is a bound argument (``F.lit`` of its value) or a column; argument values only ever become
``F.lit``, never SQL text.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from pyspark.sql import Column
from pyspark.sql import functions as F

from streaming.core.catalog import NamedQuery
from streaming.core.expressions import (
    Expr,
    In,
    Literal,
    Name,
    Unary,
    bind_arguments,
    parse_expression,
)

__all__ = ["query_filter", "to_column"]

_SPARK_OPS: dict[str, Callable[[Column, Column], Column]] = {
    "||": lambda a, b: a | b,
    "&&": lambda a, b: a & b,
    "==": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b,
    "+": F.try_add,
    "-": F.try_subtract,
    "*": F.try_multiply,
    "/": F.try_divide,
    "%": F.try_mod,
}


def to_column(expr: Expr, column: Callable[[str], Column], arguments: Mapping[str, Any]) -> Column:
    """``expr`` as a Spark Column. A name is a bound argument (``F.lit`` of its value) if it is a
    key of ``arguments``, else ``column(name)``. Never SQL text."""

    def is_null(e: Expr) -> bool:
        if isinstance(e, Name):
            return e.name in arguments and arguments[e.name] is None
        return isinstance(e, Literal) and e.value is None

    def build(e: Expr) -> Column:
        if isinstance(e, Literal):
            return F.lit(e.value)
        if isinstance(e, Name):
            return F.lit(arguments[e.name]) if e.name in arguments else column(e.name)
        if isinstance(e, Unary):
            return ~build(e.operand) if e.op == "!" else -build(e.operand)
        if isinstance(e, In):
            return build_in(e)
        if e.op in ("==", "!="):
            for tested, other in ((e.left, e.right), (e.right, e.left)):
                if is_null(other):
                    value = build(tested)
                    return value.isNull() if e.op == "==" else value.isNotNull()
        return _SPARK_OPS[e.op](build(e.left), build(e.right))

    def build_in(e: In) -> Column:
        value = build(e.value)
        if isinstance(e.options, tuple):
            return value.isin([build(item) for item in e.options])
        name = e.options.name
        if name not in arguments:
            return F.array_contains(column(name), value)
        items = arguments[name]
        return value.isin(
            [F.lit(v) for v in (items if isinstance(items, list | tuple) else [items])]
        )

    return build(expr)


def query_filter(
    query: NamedQuery, given: Mapping[str, Any], column: Callable[[str], Column], where: str
) -> Column:
    """One request's filter for a named query: parse, bind ``given`` (RejectedError), compile."""
    expr = parse_expression(query.expression)
    return to_column(expr, column, bind_arguments(query.arguments, given, where, expression=expr))
