"""Seed 000 "Column formats" and "Column mappings"."""

from __future__ import annotations

import pytest

from streaming.core.columns import ColumnFormat, resolve_columns, source_name
from streaming.core.errors import RejectedError


def test_column_format_as_specified_myField_is_myField() -> None:
    assert source_name("myField", ColumnFormat.AS_SPECIFIED) == "myField"


def test_column_format_upper_myField_is_MYFIELD() -> None:
    assert source_name("myField", ColumnFormat.UPPER) == "MYFIELD"


def test_column_format_lower_myField_is_myfield() -> None:
    assert source_name("myField", ColumnFormat.LOWER) == "myfield"


def test_column_format_upper_snake_myField_is_MY_FIELD() -> None:
    assert source_name("myField", ColumnFormat.UPPER_SNAKE) == "MY_FIELD"


def test_column_format_lower_snake_myField_is_my_field() -> None:
    assert source_name("myField", ColumnFormat.LOWER_SNAKE) == "my_field"


def test_column_format_upper_camel_myField_is_MyField() -> None:
    assert source_name("myField", ColumnFormat.UPPER_CAMEL) == "MyField"


def test_column_format_lower_camel_MyField_is_myField() -> None:
    assert source_name("MyField", ColumnFormat.LOWER_CAMEL) == "myField"
    assert source_name("myField", ColumnFormat.LOWER_CAMEL) == "myField"


@pytest.mark.parametrize(
    ("prop", "fmt", "expected"),
    [
        ("yearOfBirth", ColumnFormat.UPPER_SNAKE, "YEAR_OF_BIRTH"),
        ("HTTPServer", ColumnFormat.LOWER_SNAKE, "http_server"),
        ("my_field", ColumnFormat.UPPER_CAMEL, "MyField"),
        ("id", ColumnFormat.UPPER, "ID"),
        ("address2", ColumnFormat.UPPER_SNAKE, "ADDRESS2"),
    ],
)
def test_column_format_of_other_names(prop: str, fmt: ColumnFormat, expected: str) -> None:
    assert source_name(prop, fmt) == expected


def test_column_format_data_fields_that_do_not_match_are_ignored() -> None:
    assert resolve_columns(["myField"], ["myField"], ColumnFormat.UPPER) == {}
    assert resolve_columns(["myField"], ["MYFIELD"], ColumnFormat.UPPER) == {"myField": "MYFIELD"}


def test_column_mapping_example_FIELD_NAME_feeds_myField_and_oP_feeds_secondField() -> None:
    mapping = {"myField": "FIELD_NAME", "secondField": "oP"}
    available = ["FIELD_NAME", "oP", "THIRD_FIELD", "MY_FIELD"]
    resolved = resolve_columns(
        ["myField", "secondField", "thirdField"], available, ColumnFormat.UPPER_SNAKE, mapping
    )
    # "All other fields be looked up by provided columnFormat"; a mapped field only by its mapping.
    assert resolved == {"myField": "FIELD_NAME", "secondField": "oP", "thirdField": "THIRD_FIELD"}


def test_column_mapping_to_an_absent_column_leaves_the_property_absent() -> None:
    resolved = resolve_columns(
        ["myField"], ["MY_FIELD"], ColumnFormat.UPPER_SNAKE, {"myField": "X"}
    )
    assert resolved == {}


def test_id_is_resolved_like_any_property() -> None:
    assert resolve_columns(["id", "name"], ["ID", "NAME"], ColumnFormat.UPPER) == {
        "id": "ID",
        "name": "NAME",
    }


def test_local_files_accept_any_unambiguous_case_variant() -> None:
    available = ["MY_FIELD", "other"]
    assert resolve_columns(["myField"], available, ColumnFormat.AS_SPECIFIED, relaxed=True) == {
        "myField": "MY_FIELD"
    }
    assert resolve_columns(["myField"], available, ColumnFormat.AS_SPECIFIED) == {}


def test_local_files_relax_the_column_mapping_too() -> None:
    resolved = resolve_columns(
        ["myField"], ["field_name"], ColumnFormat.UPPER, {"myField": "FIELD_NAME"}, relaxed=True
    )
    assert resolved == {"myField": "field_name"}


def test_local_files_prefer_the_exact_format_spelling() -> None:
    resolved = resolve_columns(
        ["myField"], ["MYFIELD", "my_field"], ColumnFormat.UPPER, relaxed=True
    )
    assert resolved == {"myField": "MYFIELD"}


def test_local_files_with_two_case_variants_are_ambiguous() -> None:
    with pytest.raises(RejectedError) as caught:
        resolve_columns(["myField"], ["myfield", "MY_FIELD"], ColumnFormat.UPPER, relaxed=True)
    assert caught.value.code == "AMBIGUOUS_COLUMN"
    assert "myField" in caught.value.message
