"""Named-query expressions: parsing, names, type checking and argument binding (no Spark)."""

from __future__ import annotations

from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any

import pytest

from streaming.core.catalog import QueryArgument
from streaming.core.errors import RejectedError
from streaming.core.expressions import (
    Binary,
    ExpressionError,
    In,
    Literal,
    Name,
    Unary,
    bind_arguments,
    check_expression,
    names,
    parse_expression,
)

a, b, c, d = Name("a"), Name("b"), Name("c"), Name("d")
FIELDS = {
    "status": "string",
    "name": "string",
    "age": "integer",
    "price": "number",
    "total": "decimal",
    "good": "boolean",
    "day": "date",
    "seen": "datetime",
    "tags": "array",
    "addr": "object",
    "addr.city": "string",
}
ARGS = {"inputStatus": "string", "inputAge": "integer", "statuses": "string", "from": "date"}


def arg(name: str, type_: str) -> QueryArgument:
    return QueryArgument(name=name, type=type_)


# ---- parsing ----------------------------------------------------------------------------------


def test_seed_expression_compares_a_field_with_an_argument() -> None:
    assert parse_expression("status == inputStatus") == Binary(
        "==", Name("status"), Name("inputStatus")
    )


def test_or_binds_looser_than_and() -> None:
    assert parse_expression("a || b && c") == Binary("||", a, Binary("&&", b, c))
    assert parse_expression("a && b || c") == Binary("||", Binary("&&", a, b), c)


def test_not_binds_looser_than_comparison_and_tighter_than_and() -> None:
    assert parse_expression("!a == b && c") == Binary("&&", Unary("!", Binary("==", a, b)), c)
    assert parse_expression("!!a") == Unary("!", Unary("!", a))


def test_comparison_binds_looser_than_arithmetic() -> None:
    assert parse_expression("a + b < c * d") == Binary("<", Binary("+", a, b), Binary("*", c, d))


def test_product_binds_tighter_than_sum_and_both_associate_left() -> None:
    assert parse_expression("a - b - c") == Binary("-", Binary("-", a, b), c)
    assert parse_expression("a + b * c % d") == Binary("+", a, Binary("%", Binary("*", b, c), d))
    assert parse_expression("a / b / c") == Binary("/", Binary("/", a, b), c)


def test_unary_minus_binds_tighter_than_product_and_folds_into_numbers() -> None:
    assert parse_expression("-a * b") == Binary("*", Unary("-", a), b)
    assert parse_expression("- 2 * 3") == Binary("*", Literal(-2), Literal(3))
    assert parse_expression("--2") == Literal(2)
    assert parse_expression("-1.5") == Literal(Decimal("-1.5"))


def test_parentheses_override_precedence() -> None:
    assert parse_expression("(a || b) && c") == Binary("&&", Binary("||", a, b), c)
    assert parse_expression("(a + b) * c") == Binary("*", Binary("+", a, b), c)
    assert parse_expression("((a))") == a


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("'ready'", "ready"),
        ('"ready"', "ready"),
        ("''", ""),
        ("42", 42),
        ("007", 7),
        ("9223372036854775807", 2**63 - 1),
        ("1.50", Decimal("1.50")),
        ("true", True),
        ("false", False),
        ("null", None),
    ],
)
def test_literals_keep_their_python_type(text: str, value: object) -> None:
    parsed = parse_expression(text)
    assert isinstance(parsed, Literal)
    assert parsed.value == value and type(parsed.value) is type(value)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        (r"'it\'s'", "it's"),
        (r'"say \"hi\""', 'say "hi"'),
        ("'say \"hi\"'", 'say "hi"'),
        ('"it\'s"', "it's"),
        (r"'a\\b'", "a\\b"),
        (r"'a\nb\tc\rd\/e'", "a\nb\tc\rd/e"),
        (r"'caf\u00e9'", "café"),
        ("'x'' OR ''1''=''1'", None),  # two strings side by side: an error, not SQL quoting
    ],
)
def test_string_escapes(text: str, value: str | None) -> None:
    if value is None:
        with pytest.raises(ExpressionError):
            parse_expression(text)
    else:
        assert parse_expression(text) == Literal(value)


def test_dotted_names_are_one_identifier_and_keywords_are_not_names() -> None:
    assert parse_expression("addr.city == x_1") == Binary("==", Name("addr.city"), Name("x_1"))
    assert parse_expression("_a.b2.c") == Name("_a.b2.c")
    assert parse_expression("nullable != null") == Binary("!=", Name("nullable"), Literal(None))


def test_in_takes_a_list_literal_or_a_name() -> None:
    assert parse_expression("a in [1, 'x', b + 1]") == In(
        a, (Literal(1), Literal("x"), Binary("+", b, Literal(1)))
    )
    assert parse_expression("a in []") == In(a, ())
    assert parse_expression("a in b") == In(a, b)
    assert parse_expression("!(a in b) && c") == Binary("&&", Unary("!", In(a, b)), c)
    assert parse_expression("a + 1 in [2]") == In(Binary("+", a, Literal(1)), (Literal(2),))


def test_whitespace_is_insignificant() -> None:
    assert parse_expression(" \ta==\n b ") == parse_expression("a == b")


@pytest.mark.parametrize(
    ("text", "position", "message"),
    [
        ("", 1, "expected an operand (a name, a literal or '('), got end of input"),
        ("status ==", 10, "expected an operand (a name, a literal or '('), got end of input"),
        ("status == (a", 13, "expected ')', got end of input"),
        ("(a b)", 4, "expected ')', got 'b'"),
        ("a b", 3, "expected an operator or the end of the expression, got 'b'"),
        ("a == 'x' 'y'", 10, "expected an operator or the end of the expression, got 'y'"),
        ("a = b", 3, "got '=' (did you mean '=='?)"),
        ("a & b", 3, "got '&' (did you mean '&&'?)"),
        ("a | b", 3, "got '|' (did you mean '||'?)"),
        ("a == #", 6, "expected an operator or operand, got '#'"),
        ("a == b == c", 8, "(comparisons do not chain: use parentheses)"),
        ("a < b in [1]", 7, "comparisons do not chain"),
        ("a in (1, 2)", 6, "expected a list [a, b, ...] or a name after 'in', got '('"),
        ("a in [1, 2", 11, "expected ',' or ']', got end of input"),
        ("a in [1,]", 9, "expected an operand"),
        ("a in 'x'", 6, "after 'in', got 'x'"),
        ("a == 'ready", 6, "unterminated string: expected a closing '"),
        ('a == "ready\\"', 6, 'unterminated string: expected a closing "'),
        (r"a == 'x\q'", 8, "got '\\q'"),
        (r"a == '\u00g1'", 7, "expected 4 hex digits after \\u"),
        ("a == 1abc", 6, "expected a number, got '1abc'"),
        ("a == 1.", 6, "expected a number, got '1.'"),
        ("a == 1.2.3", 6, "expected a number, got '1.2.3'"),
        ("a. == 1", 2, "got '.'"),
        ("a == 9223372036854775808", 6, "expected a 64-bit integer"),
        ("a == !b", 6, "expected an operand"),
    ],
)
def test_syntax_errors_give_the_position_and_what_was_expected(
    text: str, position: int, message: str
) -> None:
    with pytest.raises(ExpressionError) as caught:
        parse_expression(text)
    assert caught.value.position == position
    assert str(caught.value).startswith(f"at position {position}: ")
    assert message in str(caught.value)


def test_expression_error_is_a_value_error() -> None:
    assert issubclass(ExpressionError, ValueError)


def test_absurd_nesting_is_an_expression_error_not_a_crash() -> None:
    with pytest.raises(ExpressionError, match="nested too deeply"):
        parse_expression("(" * 5000 + "a" + ")" * 5000)


# ---- names ------------------------------------------------------------------------------------


def test_names_are_every_identifier_used_once() -> None:
    expr = parse_expression("a.b == x && (c in [d, 1, 'e'] || f in g) && !a.b && -h > 0")
    assert names(expr) == {"a.b", "x", "c", "d", "f", "g", "h"}
    assert names(parse_expression("1 == 1")) == set()


# ---- check_expression -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "status == inputStatus",
        "age == inputAge && good",
        "status == null || age != null",
        "status == 'ready' || name in ['a', 'b'] || age in [1, -2, null]",
        "status in statuses",
        "'x' in tags",
        "addr.city == 'Paris'",
        "price * 2 > age + 1.5 && total % 3 != 0 && -age < 0",
        "day >= '2021-01-01' && seen < '2021-01-01T10:00:00' && day <= seen",
        "day >= from",
        "good == true && !(good != false)",
        "status < 'm' && name >= status",
        "true",
        "null == null",
    ],
)
def test_well_typed_expressions_pass(text: str) -> None:
    expr = parse_expression(text)
    resolved = check_expression(expr, FIELDS, ARGS)
    # Every name read, each as the field or the argument it is.
    assert resolved.fields | resolved.arguments == names(expr)
    assert resolved.fields <= set(FIELDS) and resolved.arguments <= set(ARGS)


def test_unknown_name_is_named_with_a_suggestion() -> None:
    with pytest.raises(ExpressionError) as caught:
        check_expression(parse_expression("stats == inputStatus"), FIELDS, ARGS)
    assert str(caught.value) == "unknown name 'stats' (did you mean 'status'?)"
    assert caught.value.position is None
    with pytest.raises(ExpressionError, match=r"^unknown name 'zzz'$"):
        check_expression(parse_expression("zzz"), FIELDS, ARGS)


def test_unknown_name_after_in_is_named() -> None:
    with pytest.raises(ExpressionError, match="unknown name 'nope'"):
        check_expression(parse_expression("status in nope"), FIELDS, ARGS)


def test_a_name_that_is_a_field_and_an_argument_is_ambiguous() -> None:
    with pytest.raises(ExpressionError, match="'status' is both a field and an argument"):
        check_expression(parse_expression("status == 'x'"), FIELDS, {"status": "string"})


def test_arguments_resolve_when_no_field_has_the_name() -> None:
    resolved = check_expression(
        parse_expression("inputStatus == 'x'"), {}, {"inputStatus": "string!"}
    )
    assert resolved == (frozenset(), frozenset({"inputStatus"}))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("status", "must be a condition (true/false), got a string"),
        ("age + 1", "must be a condition (true/false), got a number"),
        ("null", "must be a condition (true/false), got null"),
        ("status == 1", "'==' cannot compare a string with a number"),
        ("age == inputStatus", "'==' cannot compare a number with a string"),
        ("good < true", "'<' cannot compare a boolean with a boolean"),
        ("status < null", "'<' cannot compare with null: use == null or != null"),
        ("tags == tags", "'==' cannot compare an array with an array"),
        ("addr == addr", "'==' cannot compare an object with an object"),
        ("age in ['a']", "'in' cannot compare a number with a string"),
        ("age in statuses", "'in' cannot compare a number with a string"),
        ("tags in ['a']", "'in' cannot look for an array"),
        ("status in name", "'in' takes a list or an array field: 'name' is a string field"),
        (
            "status in statuses || statuses == 'x'",
            "argument 'statuses' is a list (after 'in'): not a value",
        ),
        ("!status", "'!' takes boolean values, got a string"),
        ("-good > 0", "'-' takes number values, got a boolean"),
        ("age + 'x' > 1", "'+' takes number values, got a string"),
        ("good && age", "'&&' takes boolean values, got a number"),
        ("age || good", "'||' takes boolean values, got a number"),
        ("day > '2021-13-45'", "'2021-13-45' is not an ISO date or date-time"),
        ("day == name", "'==' cannot compare a date/time with a string"),
    ],
)
def test_ill_typed_expressions_are_refused(text: str, message: str) -> None:
    with pytest.raises(ExpressionError) as caught:
        check_expression(parse_expression(text), FIELDS, ARGS)
    assert message in str(caught.value)


# ---- bind_arguments ---------------------------------------------------------------------------

WHERE = "actions[0] query withStatus"


def rejected(declared: list[QueryArgument], given: dict[str, Any], **kw: Any) -> RejectedError:
    with pytest.raises(RejectedError) as caught:
        bind_arguments(declared, given, WHERE, **kw)
    assert caught.value.message.startswith(f"{WHERE}: ")
    return caught.value


def test_seed_arguments_bind_unchanged() -> None:
    declared = [arg("inputStatus", "string")]
    assert bind_arguments(declared, {"inputStatus": "ready"}, WHERE) == {"inputStatus": "ready"}
    assert bind_arguments([arg("inputYear", "integer")], {"inputYear": 2021}, WHERE) == {
        "inputYear": 2021
    }
    assert bind_arguments([], {}, WHERE) == {}


def test_an_undeclared_argument_is_UNKNOWN_ARGUMENT() -> None:
    error = rejected([arg("inputStatus", "string")], {"inputStatus": "x", "inputStatu": "y"})
    assert error.code == "UNKNOWN_ARGUMENT"
    assert error.message == f"{WHERE}: unknown argument 'inputStatu' (declared: inputStatus)"
    assert rejected([], {"x": 1}).message == f"{WHERE}: unknown argument 'x' (declared: none)"


def test_a_declared_argument_not_given_is_MISSING_ARGUMENT() -> None:
    error = rejected([arg("inputStatus", "string")], {})
    assert error.code == "MISSING_ARGUMENT"
    assert error.message == f"{WHERE}: missing argument 'inputStatus' (string)"


def test_null_is_allowed_only_when_given_explicitly() -> None:
    declared = [arg("inputStatus", "string")]
    assert bind_arguments(declared, {"inputStatus": None}, WHERE) == {"inputStatus": None}
    assert rejected(declared, {}).code == "MISSING_ARGUMENT"


def test_a_required_argument_refuses_null() -> None:
    error = rejected([arg("inputStatus", "string!")], {"inputStatus": None})
    assert error.code == "ARGUMENT_TYPE_MISMATCH"
    assert "must be a string (the argument is required: not null), got null" in error.message


@pytest.mark.parametrize(
    ("type_", "value", "shown"),
    [
        ("integer", "2021", '"2021"'),
        ("integer", True, "true"),
        ("integer", 1.5, "1.5"),
        ("integer", 2.0, "2.0"),
        ("integer", 2**63, str(2**63)),
        ("integer", [2021], "[2021]"),
        ("number", "1.5", '"1.5"'),
        ("number", False, "false"),
        ("decimal", True, "true"),
        ("decimal", float("nan"), "NaN"),
        ("decimal", "1.5", '"1.5"'),
        ("string", 5, "5"),
        ("string", {"a": 1}, '{"a": 1}'),
        ("boolean", "true", '"true"'),
        ("boolean", 1, "1"),
        ("date", "2021-13-01", '"2021-13-01"'),
        ("date", "yesterday", '"yesterday"'),
        ("date", 20210101, "20210101"),
        ("datetime", "2021-01-01 25:00", '"2021-01-01 25:00"'),
        ("timestamp", 1609459200, "1609459200"),
        ("binary", "not base64!", '"not base64!"'),
    ],
)
def test_a_value_of_the_wrong_type_is_ARGUMENT_TYPE_MISMATCH(
    type_: str, value: object, shown: str
) -> None:
    error = rejected([arg("x", type_)], {"x": value})
    assert error.code == "ARGUMENT_TYPE_MISMATCH"
    assert error.message.startswith(f"{WHERE}: argument 'x' must be ")
    assert error.message.endswith(f", got {shown}")


def test_a_mismatch_message_says_what_was_wanted() -> None:
    error = rejected([arg("inputYear", "integer")], {"inputYear": "2021"})
    assert error.message == f"{WHERE}: argument 'inputYear' must be an integer, got \"2021\""


@pytest.mark.parametrize(
    ("type_", "value", "bound"),
    [
        ("string", "x' OR '1'='1", "x' OR '1'='1"),
        ("string!", "1; DROP TABLE t", "1; DROP TABLE t"),
        ("integer", -(2**63), -(2**63)),
        ("number", 1, 1.0),
        ("number", 1.5, 1.5),
        ("decimal", 1, Decimal("1")),
        ("decimal", 1.25, Decimal("1.25")),
        ("decimal", Decimal("12.345"), Decimal("12.345")),
        ("boolean", False, False),
        ("date", "2021-01-02", date(2021, 1, 2)),
        ("date", date(2021, 1, 2), date(2021, 1, 2)),
        ("datetime", "2021-01-02T03:04:05", datetime(2021, 1, 2, 3, 4, 5)),
        ("timestamp", "2021-01-02T03:04:05Z", datetime(2021, 1, 2, 3, 4, 5, tzinfo=UTC)),
        ("datetime", "2021-01-02", datetime(2021, 1, 2)),
        ("binary", "aGk=", b"hi"),
    ],
)
def test_values_are_converted_to_what_spark_reads_as_the_type(
    type_: str, value: object, bound: object
) -> None:
    result = bind_arguments([arg("x", type_)], {"x": value}, WHERE)["x"]
    assert result == bound and type(result) is type(bound)


def test_a_date_argument_refuses_a_date_time_object() -> None:
    assert rejected([arg("x", "date")], {"x": datetime(2021, 1, 2)}).code == (
        "ARGUMENT_TYPE_MISMATCH"
    )


def test_arguments_after_in_take_lists_of_the_declared_type() -> None:
    expr = parse_expression("status in statuses && age in ages")
    declared = [arg("statuses", "string"), arg("ages", "integer")]
    given = {"statuses": ["ready", None, "x' OR '1'='1"], "ages": [1, 2]}
    assert bind_arguments(declared, given, WHERE, expression=expr) == given
    assert bind_arguments(declared, {"statuses": [], "ages": None}, WHERE, expression=expr) == {
        "statuses": [],
        "ages": None,
    }
    error = rejected(declared, {"statuses": "ready", "ages": [1]}, expression=expr)
    assert (error.code, error.message) == (
        "ARGUMENT_TYPE_MISMATCH",
        f"{WHERE}: argument 'statuses' must be a list of string values, got \"ready\"",
    )
    error = rejected(declared, {"statuses": [], "ages": [1, "2"]}, expression=expr)
    assert "argument 'ages' must be a list of integer values" in error.message


def test_a_list_for_a_plain_argument_is_a_mismatch() -> None:
    expr = parse_expression("status == s")
    error = rejected([arg("s", "string")], {"s": ["a"]}, expression=expr)
    assert error.code == "ARGUMENT_TYPE_MISMATCH"


def test_unknown_is_reported_before_missing_and_missing_before_mismatch() -> None:
    declared = [arg("a", "integer"), arg("b", "integer")]
    assert rejected(declared, {"a": "x", "c": 1}).code == "UNKNOWN_ARGUMENT"
    assert rejected(declared, {"a": "x"}).code == "MISSING_ARGUMENT"
    assert rejected(declared, {"a": "x", "b": 1}).code == "ARGUMENT_TYPE_MISMATCH"
