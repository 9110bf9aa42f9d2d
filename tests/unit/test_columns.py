"""Seed 000 "Column formats" and "Column mappings"."""

from __future__ import annotations

import pytest

from streaming.core.columns import ColumnFormat, resolve_columns, source_name
from streaming.errors import RejectedError


@pytest.mark.parametrize(
    ("fmt", "expected"),
    [
        (ColumnFormat.AS_SPECIFIED, "myField"),
        (ColumnFormat.UPPER, "MYFIELD"),
        (ColumnFormat.LOWER, "myfield"),
        (ColumnFormat.UPPER_SNAKE, "MY_FIELD"),
        (ColumnFormat.LOWER_SNAKE, "my_field"),
        (ColumnFormat.UPPER_CAMEL, "MyField"),
        (ColumnFormat.LOWER_CAMEL, "myField"),
    ],
)
def test_seed_column_format_of_myField(fmt: ColumnFormat, expected: str) -> None:
    assert source_name("myField", fmt) == expected


def test_seed_lower_camel_example_MyField_is_myField() -> None:
    assert source_name("MyField", ColumnFormat.LOWER_CAMEL) == "myField"


def test_fields_not_in_the_format_are_ignored() -> None:
    assert resolve_columns(["myField"], ["myField"], ColumnFormat.UPPER) == {}
    assert resolve_columns(["myField"], ["MYFIELD"], ColumnFormat.UPPER) == {"myField": "MYFIELD"}


def test_seed_column_mapping_example() -> None:
    mapping = {"myField": "FIELD_NAME", "secondField": "oP"}
    available = ["FIELD_NAME", "oP", "THIRD_FIELD", "MYFIELD"]
    resolved = resolve_columns(
        ["myField", "secondField", "thirdField"], available, ColumnFormat.UPPER_SNAKE, mapping
    )
    assert resolved == {"myField": "FIELD_NAME", "secondField": "oP", "thirdField": "THIRD_FIELD"}


def test_local_files_accept_any_unambiguous_case_variant() -> None:
    available = ["MY_FIELD", "other"]
    assert resolve_columns(["myField"], available, ColumnFormat.AS_SPECIFIED, relaxed=True) == {
        "myField": "MY_FIELD"
    }
    with pytest.raises(RejectedError) as caught:
        resolve_columns(["myField"], ["myfield", "MY_FIELD"], ColumnFormat.UPPER, relaxed=True)
    assert caught.value.code == "AMBIGUOUS_COLUMN"
