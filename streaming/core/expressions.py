"""Named-query expressions (seed 000 ``queries``), e.g. ``status == inputStatus``.

Text → tokens → a small AST of frozen dataclasses → checked against a schema's columns and the
query's arguments → a Spark Column. Never SQL text: argument values only ever become ``F.lit``.

Grammar, lowest precedence first (``NAME`` may be dotted, ``a.b``, for a nested field)::

    or      := and ('||' and)*
    and     := not ('&&' not)*
    not     := '!' not | compare
    compare := sum (('==' | '!=' | '<' | '<=' | '>' | '>=') sum | 'in' (list | NAME))?
    sum     := product (('+' | '-') product)*
    product := unary (('*' | '/' | '%') unary)*
    unary   := '-' unary | primary
    primary := '(' or ')' | STRING | INTEGER | DECIMAL | 'true' | 'false' | 'null' | NAME
    list    := '[' (or (',' or)*)? ']'

Comparisons do not chain (``a == b == c`` is an error). ``x in NAME`` takes a list argument or an
array field. Semantics are Spark SQL's (a comparison with a null column value is null: the row is
not kept), except that ``x == null`` / ``x != null`` — a null literal or an argument bound to
null — test for null. Arithmetic that overflows or divides by zero gives null instead of failing.
"""

from __future__ import annotations

import base64
import difflib
import json
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal
from string import hexdigits
from typing import Any, NamedTuple, Protocol, TypeAlias

from streaming.core.codes import Code
from streaming.core.errors import RejectedError

__all__ = [
    "Argument",
    "Binary",
    "Expr",
    "ExpressionError",
    "In",
    "Literal",
    "Name",
    "Resolved",
    "Unary",
    "Value",
    "bind_arguments",
    "check_expression",
    "names",
    "parse_expression",
]


class Argument(Protocol):
    """A declared argument of a named query or a query schema (``core.catalog.QueryArgument``)."""

    @property
    def name(self) -> str: ...

    @property
    def type(self) -> str: ...


class ExpressionError(ValueError):
    """A malformed or ill-typed expression; ``position`` (1-based) when the parser knows it."""

    def __init__(self, message: str, position: int | None = None) -> None:
        super().__init__(message if position is None else f"at position {position}: {message}")
        self.position = position


# ---- the AST ----------------------------------------------------------------------------------

Value: TypeAlias = str | int | Decimal | bool | None


@dataclass(frozen=True)
class Literal:
    value: Value


@dataclass(frozen=True)
class Name:
    name: str


@dataclass(frozen=True)
class Unary:
    op: str  # '!' or '-'
    operand: Expr


@dataclass(frozen=True)
class Binary:
    op: str
    left: Expr
    right: Expr


@dataclass(frozen=True)
class In:
    value: Expr
    options: tuple[Expr, ...] | Name  # a list literal, or a list argument / array field


Expr: TypeAlias = Literal | Name | Unary | Binary | In

_COMPARISONS = ("==", "!=", "<=", ">=", "<", ">")
_ARITHMETIC = ("+", "-", "*", "/", "%")
_OPERATORS = ("||", "&&", *_COMPARISONS, "!", *_ARITHMETIC, "(", ")", "[", "]", ",")
_KEYWORDS: dict[str, Value] = {"true": True, "false": False, "null": None}
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")
_NUMBER = re.compile(r"[0-9]+(?:\.[0-9]+)?")
_ESCAPES = {"\\": "\\", "'": "'", '"': '"', "/": "/", "n": "\n", "t": "\t", "r": "\r"}
_HINTS = {"=": "'=='", "&": "'&&'", "|": "'||'"}
_LONG = 2**63  # integers are 64-bit (Spark LongType)


# ---- tokens and parser ------------------------------------------------------------------------


@dataclass(frozen=True)
class _Token:
    kind: str  # "op" (operators and 'in'), "name", "literal" or "end"
    text: str
    position: int  # 1-based
    value: Value = None


def _string(text: str, start: int) -> tuple[str, int]:
    """The string literal opening at ``start``: its value and the index after its closing quote."""
    quote, chars, i = text[start], [], start + 1
    while i < len(text) and text[i] != quote:
        if text[i] != "\\":
            chars.append(text[i])
            i += 1
        elif text[i + 1 : i + 2] == "u":
            digits = text[i + 2 : i + 6]
            if len(digits) < 4 or not all(d in hexdigits for d in digits):
                raise ExpressionError("expected 4 hex digits after \\u", i + 1)
            chars.append(chr(int(digits, 16)))
            i += 6
        elif text[i + 1 : i + 2] in _ESCAPES:
            chars.append(_ESCAPES[text[i + 1]])
            i += 2
        elif i + 1 < len(text):
            expected = "one of \\\\ \\' \\\" \\/ \\n \\t \\r \\uXXXX"
            raise ExpressionError(f"expected {expected}, got '\\{text[i + 1]}'", i + 1)
        else:
            break
    if i >= len(text):
        raise ExpressionError(f"unterminated string: expected a closing {quote}", start + 1)
    return "".join(chars), i + 1


def _number(spelled: str, position: int) -> int | Decimal:
    if "." in spelled:
        return Decimal(spelled)
    if int(spelled) >= _LONG:
        raise ExpressionError(f"expected a 64-bit integer, got {spelled}", position)
    return int(spelled)


def _tokens(text: str) -> list[_Token]:
    tokens: list[_Token] = []
    i = 0
    while i < len(text):
        if text[i].isspace():
            i += 1
            continue
        start = i
        if text[i] in "'\"":
            value, i = _string(text, i)
            tokens.append(_Token("literal", text[start:i], start + 1, value))
        elif number := _NUMBER.match(text, i):
            i = number.end()
            if i < len(text) and (text[i].isalnum() or text[i] in "_."):
                while i < len(text) and (text[i].isalnum() or text[i] in "_."):
                    i += 1
                raise ExpressionError(f"expected a number, got '{text[start:i]}'", start + 1)
            spelled = number.group()
            tokens.append(_Token("literal", spelled, start + 1, _number(spelled, start + 1)))
        elif name := _NAME.match(text, i):
            i, word = name.end(), name.group()
            if word in _KEYWORDS:
                tokens.append(_Token("literal", word, start + 1, _KEYWORDS[word]))
            else:
                tokens.append(_Token("op" if word == "in" else "name", word, start + 1))
        else:
            op = next((op for op in _OPERATORS if text.startswith(op, i)), None)
            if op is None:
                hint = f" (did you mean {_HINTS[text[i]]}?)" if text[i] in _HINTS else ""
                raise ExpressionError(
                    f"expected an operator or operand, got '{text[i]}'{hint}", i + 1
                )
            i += len(op)
            tokens.append(_Token("op", op, start + 1))
    tokens.append(_Token("end", "", len(text) + 1))
    return tokens


class _Parser:
    def __init__(self, text: str) -> None:
        self.tokens = _tokens(text)
        self.i = 0

    def peek(self) -> _Token:
        return self.tokens[self.i]

    def accept(self, *ops: str) -> str | None:
        token = self.peek()
        if token.kind == "op" and token.text in ops:
            self.i += 1
            return token.text
        return None

    def error(self, expected: str, note: str = "") -> ExpressionError:
        token = self.peek()
        got = "end of input" if token.kind == "end" else token.text
        if token.kind != "end" and token.text[0] not in "'\"":
            got = f"'{got}'"
        return ExpressionError(f"expected {expected}, got {got}{note}", token.position)

    def expect(self, op: str) -> None:
        if self.accept(op) is None:
            raise self.error(f"'{op}'")

    def parse(self) -> Expr:
        expr = self.or_()
        if self.peek().kind != "end":
            raise self.error("an operator or the end of the expression")
        return expr

    def or_(self) -> Expr:
        left = self.and_()
        while self.accept("||"):
            left = Binary("||", left, self.and_())
        return left

    def and_(self) -> Expr:
        left = self.not_()
        while self.accept("&&"):
            left = Binary("&&", left, self.not_())
        return left

    def not_(self) -> Expr:
        if self.accept("!"):
            return Unary("!", self.not_())
        return self.compare()

    def compare(self) -> Expr:
        left = self.sum()
        if op := self.accept(*_COMPARISONS):
            left = Binary(op, left, self.sum())
        elif self.accept("in"):
            left = In(left, self.options())
        else:
            return left
        if self.peek().kind == "op" and self.peek().text in (*_COMPARISONS, "in"):
            raise self.error("'&&' or '||'", " (comparisons do not chain: use parentheses)")
        return left

    def options(self) -> tuple[Expr, ...] | Name:
        if self.accept("["):
            if self.accept("]"):
                return ()
            items = [self.or_()]
            while self.accept(","):
                items.append(self.or_())
            if self.accept("]") is None:
                raise self.error("',' or ']'")
            return tuple(items)
        token = self.peek()
        if token.kind != "name":
            raise self.error("a list [a, b, ...] or a name after 'in'")
        self.i += 1
        return Name(token.text)

    def sum(self) -> Expr:
        left = self.product()
        while op := self.accept("+", "-"):
            left = Binary(op, left, self.product())
        return left

    def product(self) -> Expr:
        left = self.unary()
        while op := self.accept("*", "/", "%"):
            left = Binary(op, left, self.unary())
        return left

    def unary(self) -> Expr:
        if self.accept("-"):
            operand = self.unary()
            number = operand.value if isinstance(operand, Literal) else None
            if isinstance(number, int | Decimal) and not isinstance(number, bool):
                return Literal(-number)  # a negative number
            return Unary("-", operand)
        return self.primary()

    def primary(self) -> Expr:
        token = self.peek()
        if token.kind in ("literal", "name"):
            self.i += 1
            return Literal(token.value) if token.kind == "literal" else Name(token.text)
        if self.accept("("):
            inner = self.or_()
            self.expect(")")
            return inner
        raise self.error("an operand (a name, a literal or '(')")


def parse_expression(text: str) -> Expr:
    """Parse a named query's expression; ExpressionError says where and what was expected."""
    try:
        return _Parser(text).parse()
    except RecursionError as e:
        raise ExpressionError("the expression is nested too deeply") from e


def _walk(expr: Expr) -> Iterator[Expr]:
    yield expr
    if isinstance(expr, Unary):
        yield from _walk(expr.operand)
    elif isinstance(expr, Binary):
        yield from _walk(expr.left)
        yield from _walk(expr.right)
    elif isinstance(expr, In):
        yield from _walk(expr.value)
        for item in (expr.options,) if isinstance(expr.options, Name) else expr.options:
            yield from _walk(item)


def names(expr: Expr) -> set[str]:
    """The identifiers ``expr`` uses (fields and arguments)."""
    return {e.name for e in _walk(expr) if isinstance(e, Name)}


def _list_names(expr: Expr) -> set[str]:
    """The names after ``in``: list arguments (or array fields)."""
    return {
        e.options.name for e in _walk(expr) if isinstance(e, In) and isinstance(e.options, Name)
    }


# ---- names and types --------------------------------------------------------------------------

_KINDS = {
    "string": "string",
    "integer": "number",
    "number": "number",
    "decimal": "number",
    "boolean": "boolean",
    "date": "date/time",
    "datetime": "date/time",
    "timestamp": "date/time",
}
_EQUATABLE = {"string", "number", "boolean", "date/time", "binary"}
_ORDERED = {"string", "number", "date/time"}


def _kind(base_type: str) -> str:
    """A catalog type's kind for type checking: integer, number and decimal are all "number"."""
    base = base_type.removesuffix("!")
    return _KINDS.get(base, base)


def _a(kind: str) -> str:
    return "null" if kind == "null" else f"{'an' if kind[0] in 'aeiou' else 'a'} {kind}"


def _literal_kind(value: Value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    return "string" if isinstance(value, str) else "number"


def _is_iso_time(text: str) -> bool:
    for parse in (date.fromisoformat, datetime.fromisoformat):
        try:
            parse(text)
            return True
        except ValueError:
            pass
    return False


class _Checker:
    def __init__(
        self, fields: Mapping[str, str], arguments: Mapping[str, str], lists: set[str]
    ) -> None:
        self.fields, self.arguments, self.lists = fields, arguments, lists
        self.resolved: dict[str, bool] = {}
        """Every name read → whether it is a field (else an argument)."""

    def resolve(self, name: str) -> tuple[bool, str]:
        """(is a field, its catalog type)."""
        if name in self.fields and name in self.arguments:
            raise ExpressionError(f"name {name!r} is both a field and an argument (ambiguous)")
        if name in self.fields:
            self.resolved[name] = True
            return True, self.fields[name]
        if name in self.arguments:
            self.resolved[name] = False
            return False, self.arguments[name]
        close = difflib.get_close_matches(name, [*self.fields, *self.arguments], n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ExpressionError(f"unknown name {name!r}{hint}")

    def kind(self, expr: Expr) -> str:
        if isinstance(expr, Literal):
            return _literal_kind(expr.value)
        if isinstance(expr, Name):
            is_field, type_ = self.resolve(expr.name)
            if not is_field and expr.name in self.lists:
                raise ExpressionError(f"argument {expr.name!r} is a list (after 'in'): not a value")
            return _kind(type_)
        if isinstance(expr, Unary):
            wanted = "boolean" if expr.op == "!" else "number"
            self.need(expr.op, wanted, self.kind(expr.operand))
            return wanted
        if isinstance(expr, In):
            return self.kind_in(expr)
        left, right = self.kind(expr.left), self.kind(expr.right)
        if expr.op in ("&&", "||", *_ARITHMETIC):
            wanted = "number" if expr.op in _ARITHMETIC else "boolean"
            self.need(expr.op, wanted, left)
            self.need(expr.op, wanted, right)
            return wanted
        self.compare(expr.op, (expr.left, left), (expr.right, right))
        return "boolean"

    def kind_in(self, expr: In) -> str:
        value = (expr.value, self.kind(expr.value))
        if value[1] not in (*_EQUATABLE, "null"):
            raise ExpressionError(f"'in' cannot look for {_a(value[1])}")
        if isinstance(expr.options, Name):
            is_field, type_ = self.resolve(expr.options.name)
            if is_field and _kind(type_) != "array":
                what = f"{expr.options.name!r} is {_a(_kind(type_))} field"
                raise ExpressionError(f"'in' takes a list or an array field: {what}")
            if not is_field:
                self.compare("in", value, (expr.options, _kind(type_)))
            return "boolean"
        for item in expr.options:
            self.compare("in", value, (item, self.kind(item)))
        return "boolean"

    @staticmethod
    def need(op: str, wanted: str, kind: str) -> None:
        if kind not in (wanted, "null"):
            raise ExpressionError(f"'{op}' takes {wanted} values, got {_a(kind)}")

    @staticmethod
    def compare(op: str, left: tuple[Expr, str], right: tuple[Expr, str]) -> None:
        kinds = {left[1], right[1]}
        if "null" in kinds:
            if op in ("<", "<=", ">", ">="):
                raise ExpressionError(f"'{op}' cannot compare with null: use == null or != null")
            return
        allowed = _EQUATABLE if op in ("==", "!=", "in") else _ORDERED
        if kinds == {"string", "date/time"}:
            text = next(e for e, k in (left, right) if k == "string")
            if isinstance(text, Literal) and isinstance(text.value, str):
                if not _is_iso_time(text.value):
                    raise ExpressionError(f"{text.value!r} is not an ISO date or date-time")
                return
        if len(kinds) > 1 or not kinds <= allowed:
            raise ExpressionError(f"'{op}' cannot compare {_a(left[1])} with {_a(right[1])}")


class Resolved(NamedTuple):
    """The names a checked expression reads: its fields and its arguments."""

    fields: frozenset[str]
    arguments: frozenset[str]


def check_expression(
    expr: Expr, fields: Mapping[str, str], arguments: Mapping[str, str]
) -> Resolved:
    """Check names and types. ``fields`` / ``arguments``: name → catalog type ("string", ...).

    A name is a field or an argument, never both; operands fit their operators; the whole
    expression is a condition (boolean). Returns which names are fields and which arguments."""
    checker = _Checker(fields, arguments, _list_names(expr))
    kind = checker.kind(expr)
    if kind != "boolean":
        raise ExpressionError(f"the expression must be a condition (true/false), got {_a(kind)}")
    read = checker.resolved
    return Resolved(
        frozenset(n for n, f in read.items() if f), frozenset(n for n, f in read.items() if not f)
    )


# ---- arguments of a request -------------------------------------------------------------------

_WANTED = {
    "string": "a string",
    "integer": "an integer",
    "number": "a number",
    "decimal": "a number",
    "boolean": "true or false",
    "date": "an ISO date string (YYYY-MM-DD)",
    "datetime": "an ISO date-time string",
    "timestamp": "an ISO date-time string",
    "binary": "a base64 string",
}


def _convert(base: str, value: object) -> object:
    """``value`` as the Python value Spark reads as ``base``; ValueError when it is not one."""
    if base == "string" and isinstance(value, str):
        return value
    if base == "boolean" and isinstance(value, bool):
        return value
    if base == "integer" and isinstance(value, int) and not isinstance(value, bool):
        if -_LONG <= value < _LONG:
            return value
    elif base == "number" and isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    elif base == "decimal" and isinstance(value, int | float | Decimal):
        number = Decimal(str(value))
        if number.is_finite() and not isinstance(value, bool):  # str(True) is no number anyway
            return number
    elif base == "date" and isinstance(value, date) and not isinstance(value, datetime):
        return value
    elif base == "date" and isinstance(value, str):
        return date.fromisoformat(value)
    elif base in ("datetime", "timestamp") and isinstance(value, datetime):
        return value
    elif base in ("datetime", "timestamp") and isinstance(value, str):
        return datetime.fromisoformat(value)
    elif base == "binary" and isinstance(value, bytes):
        return value
    elif base == "binary" and isinstance(value, str):
        return base64.b64decode(value, validate=True)
    raise ValueError(value)


def _shown(value: object) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= 60 else text[:57] + "..."


def _bind(where: str, argument: Argument, value: object, is_list: bool) -> object:
    """One argument's value (a list of them after ``in``); ``type!`` refuses null."""
    base, required = argument.type.removesuffix("!"), argument.type.endswith("!")
    try:
        if value is None and not required:
            return None
        if is_list and isinstance(value, list | tuple):
            return [None if v is None else _convert(base, v) for v in value]
        if not is_list and value is not None:
            return _convert(base, value)
    except (ValueError, ArithmeticError):
        pass
    wanted = f"a list of {base} values" if is_list else _WANTED.get(base, f"a {base}")
    if value is None:
        wanted += " (the argument is required: not null)"
    raise RejectedError(
        f"{where}: argument {argument.name!r} must be {wanted}, got {_shown(value)}",
        code=Code.ARGUMENT_TYPE_MISMATCH,
    )


def bind_arguments(
    declared: Sequence[Argument],
    given: Mapping[str, Any],
    where: str,
    *,
    expression: Expr | None = None,
) -> dict[str, Any]:
    """A request's ``arguments`` checked against the declared ones, as Python values for F.lit.

    Every declared argument must be given (``null`` only explicitly); dates and date-times are
    parsed from ISO strings. Arguments after ``in`` in ``expression`` take lists. RejectedError:
    UNKNOWN_ARGUMENT, MISSING_ARGUMENT, ARGUMENT_TYPE_MISMATCH; ``where`` starts the message."""
    declared_names = [a.name for a in declared]
    unknown = [name for name in given if name not in declared_names]
    if unknown:
        listed = ", ".join(declared_names) or "none"
        raise RejectedError(
            f"{where}: unknown argument {', '.join(map(repr, unknown))} (declared: {listed})",
            code=Code.UNKNOWN_ARGUMENT,
        )
    missing = [f"{a.name!r} ({a.type})" for a in declared if a.name not in given]
    if missing:
        raise RejectedError(
            f"{where}: missing argument {', '.join(missing)}", code=Code.MISSING_ARGUMENT
        )
    lists = _list_names(expression) if expression is not None else set()
    return {a.name: _bind(where, a, given[a.name], a.name in lists) for a in declared}
