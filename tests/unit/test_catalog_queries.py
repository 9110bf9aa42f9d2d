"""Named queries in dataset definitions are parsed and checked when the dataset loads."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from streaming.core.catalog import load_dataset, parse_dataset, query_problems
from streaming.core.errors import ConfigError

DOG_CHANGE = """
petstore.DogChange:
  properties:
    status: {type: string}
    name: {type: string}
    owner:
      type: object
      properties: {city: {type: string}}
  queries:
    withStatus:
      arguments: [{name: inputStatus, type: string}]
      expression: {expression}
"""


def dog_change(expression: str) -> str:
    return DOG_CHANGE.replace("{expression}", expression)


def problem(text: str) -> str:
    with pytest.raises(ConfigError) as caught:
        parse_dataset("petstore", yaml.safe_load(text))
    return caught.value.message


def test_the_seed_query_loads() -> None:
    dataset = parse_dataset("petstore", yaml.safe_load(dog_change("status == inputStatus")))
    assert dataset.schemas["petstore.DogChange"].queries["withStatus"].expression == (
        "status == inputStatus"
    )


def test_an_unknown_name_fails_naming_the_key() -> None:
    assert problem(dog_change("stats == inputStatus")) == (
        "petstore.DogChange.queries.withStatus.expression: unknown name 'stats'"
        " (did you mean 'status'?)"
    )


def test_a_syntax_error_fails_naming_the_key_and_the_position() -> None:
    assert problem(dog_change("'status == (inputStatus'")) == (
        "petstore.DogChange.queries.withStatus.expression: at position 23:"
        " expected ')', got end of input"
    )


def test_a_type_error_fails_naming_the_key() -> None:
    assert problem(dog_change("status == 1")).startswith(
        "petstore.DogChange.queries.withStatus.expression: '==' cannot compare a string"
    )


def test_object_meta_columns_and_nested_properties_are_names() -> None:
    text = dog_change("'id != null && version > 1 && created < updated && owner.city == \"x\"'")
    dataset = parse_dataset("petstore", yaml.safe_load(text))
    assert "owner.city" in dataset.schemas["petstore.DogChange"].queries["withStatus"].expression
    # The same names misspelled are refused: the check read each of them.
    assert "unknown name 'versio'" in problem(dog_change("'versio > 1'"))
    assert "unknown name 'owner.town'" in problem(dog_change("'owner.town == \"x\"'"))


def test_hash_is_not_a_name_and_a_view_has_only_its_properties() -> None:
    assert "unknown name 'hash'" in problem(dog_change("hash == inputStatus"))
    view = """
p.V:
  type: view
  sql: SELECT 1 AS total
  properties: {total: {type: integer}}
  queries:
    big: {expression: id == null || version > total}
"""
    assert problem(view) == "p.V.queries.big.expression: unknown name 'id'"


def test_every_bad_query_is_reported_at_once() -> None:
    text = """
p.Dog:
  properties: {name: {type: string}}
  queries:
    one: {expression: nam == 'x'}
    two: {expression: name ==}
    three: {expression: name == 'x'}
"""
    assert problem(text).split("; ") == [
        "p.Dog.queries.one.expression: unknown name 'nam' (did you mean 'name'?)",
        "p.Dog.queries.two.expression: at position 8: expected an operand"
        " (a name, a literal or '('), got end of input",
    ]


def test_query_problems_yields_nothing_for_a_good_schema() -> None:
    dataset = parse_dataset("petstore", yaml.safe_load(dog_change("status == inputStatus")))
    assert list(query_problems(dataset.schemas["petstore.DogChange"])) == []


def test_a_bad_expression_in_a_file_names_the_file_and_the_key(tmp_path: Path) -> None:
    path = tmp_path / "petstore.yaml"
    path.write_text(dog_change("status = inputStatus"))
    with pytest.raises(ConfigError) as caught:
        load_dataset("petstore", path)
    assert caught.value.message == (
        f"{path}: petstore.DogChange.queries.withStatus.expression: at position 8:"
        " expected an operator or operand, got '=' (did you mean '=='?)"
    )
