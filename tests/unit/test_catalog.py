"""Dataset definitions in the seed's schema YAML syntax (seed 000 examples; docs/interface.md,
"Dataset definitions")."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from streaming.core.catalog import Dataset, PropertyDef, TombstoneKey, load_dataset, parse_dataset
from streaming.core.columns import ColumnFormat
from streaming.core.errors import ConfigError
from streaming.storage.schemas import meta_fields, spark_schema, spark_type

ROOT = Path(__file__).resolve().parents[2]

DOG = """
petstore.Dog:
  properties:
    name:
      type: string
"""
DOG_WITH_AGE = """
petstore.Dog:
  type: object
  properties:
    name:
      type: string
    age:
      type: integer
"""
DOG_CHANGE = """
petstore.DogChange:
  properties:
    status:
      type: string
    name:
      type: string
  queries:
    withStatus:
      arguments:
        - name: inputStatus
          type: string
      expression: status == inputStatus
"""
NEXT_DOG_AGE = """
petstore.NextDogAge:
  type: query
  properties:
    id:
      type: string!
    age:
      type: integer
  sql: SELECT id, age + 1 as age FROM DOG WHERE age IS NOT NULL
  using:
    DOG: petstore.Dog
"""
DOG_CHANGE_STATS = """
petstore.DogChangeStats:
  type: view
  materialized: true
  sql: SELECT STATUS AS ID, COUNT(*) AS TOTAL FROM @{dogChange} GROUP BY STATUS
  using:
    dogChange: petstore.DogChange
  primaryKey:
    - id
  properties:
    id:
      type: string
    total:
      type: integer
"""
DOG_CHANGE_STATS_AUDIT = """
petstore.DogChangeStatsAudit:
  type: object
  properties:
    id:
      type: string
    total:
      type: integer
"""
REPLACE_SCHEMAS = """
petstore.DogWithYear:
  type: object
  properties:
    name:
      type: string
    yearOfBirth:
      type: integer
      required: true

petstore.AdoptedDogs:
  type: view
  sql: 'SELECT ID, NAME, YEAR_OF_BIRTH, ''adopted'' AS STATUS FROM @{dog}'
  using:
    dog: petstore.DogWithYear
  properties:
    id:
      type: string
      required: true
    name:
      type: string
    yearOfBirth:
      type: integer
      required: true
    status:
      type: string
  queries:
    byYear:
      arguments:
        - name: inputYear
          type: integer
      expression: yearOfBirth == inputYear

petstore.DogYearStatus:
  type: object
  properties:
    name:
      type: string
    yearOfBirth:
      type: integer
      required: true
    status:
      type: string
"""
DOG_QUERY = """
petstore.DogQuery:
  type: query
  sql: SELECT * FROM @{dog} WHERE name=${name}
  using:
    dog: petstore.Dog
  arguments:
    - name: name
      type: string
  properties:
    name:
      type: string
"""


def parse(*texts: str) -> Dataset:
    return parse_dataset("petstore", yaml.safe_load("".join(texts)))


def problem(text: str) -> str:
    with pytest.raises(ConfigError) as caught:
        parse_dataset("p", yaml.safe_load(text))
    assert caught.value.code == "CONFIG_ERROR"
    return caught.value.message


def test_upsert_example_Dog_is_an_object_schema_by_default() -> None:
    dog = parse(DOG).schemas["petstore.Dog"]
    assert dog.kind == "object" and dog.is_object and not dog.is_record
    assert (dog.namespace, dog.short_name, dog.path_parts) == (
        "petstore",
        "Dog",
        ["petstore", "Dog"],
    )
    assert dog.data_columns() == ["name"]
    assert spark_schema(dog) == StructType([StructField("name", StringType())])
    assert [(f.name, f.dataType, f.nullable) for f in meta_fields(dog)] == [
        ("id", StringType(), False),
        ("version", LongType(), False),
        ("created", TimestampType(), False),
        ("updated", TimestampType(), False),
        ("hash", StringType(), False),
    ]
    assert dog.history and dog.watermark == [] and dog.tombstone is None


def test_upsert_from_other_schema_example_DogChange_query_withStatus() -> None:
    dataset = parse(DOG, DOG_CHANGE)
    query = dataset.schemas["petstore.DogChange"].queries["withStatus"]
    assert query.expression == "status == inputStatus"
    assert [(a.name, a.type) for a in query.arguments] == [("inputStatus", "string")]
    assert [s.name for s in dataset.object_schemas()] == ["petstore.Dog", "petstore.DogChange"]


def test_patch_example_NextDogAge_is_a_query_using_DOG_with_a_required_id() -> None:
    dataset = parse(DOG_WITH_AGE, NEXT_DOG_AGE)
    assert dataset.schemas["petstore.Dog"].data_columns() == ["name", "age"]
    query = dataset.schemas["petstore.NextDogAge"]
    assert query.kind == "query" and query.using == {"DOG": "petstore.Dog"}
    assert query.sql == "SELECT id, age + 1 as age FROM DOG WHERE age IS NOT NULL"
    assert query.data_columns() == ["id", "age"]  # only an object's id is a meta column
    assert query.properties["id"].is_required and query.properties["id"].base_type == "string"
    assert not query.properties["age"].is_required
    assert meta_fields(query) == [] and dataset.object_schemas() == [
        dataset.schemas["petstore.Dog"]
    ]


def test_refresh_example_DogChangeStats_is_a_materialized_view_keyed_by_id() -> None:
    stats = parse(DOG_CHANGE, DOG_CHANGE_STATS).schemas["petstore.DogChangeStats"]
    assert stats.kind == "view" and stats.materialized and stats.primary_key == ["id"]
    assert stats.using == {"dogChange": "petstore.DogChange"}
    assert stats.data_columns() == ["id", "total"]


def test_merge_example_DogChangeStatsAudit_declares_id_which_is_the_meta_column() -> None:
    audit = parse(DOG_CHANGE_STATS_AUDIT).schemas["petstore.DogChangeStatsAudit"]
    assert list(audit.properties) == ["id", "total"]
    assert audit.data_columns() == ["total"]
    assert spark_schema(audit) == StructType([StructField("total", LongType())])


def test_replace_example_DogWithYear_AdoptedDogs_byYear_and_DogYearStatus() -> None:
    dataset = parse(REPLACE_SCHEMAS)
    assert dataset.schemas["petstore.DogWithYear"].properties["yearOfBirth"].is_required
    adopted = dataset.schemas["petstore.AdoptedDogs"]
    assert adopted.sql == "SELECT ID, NAME, YEAR_OF_BIRTH, 'adopted' AS STATUS FROM @{dog}"
    by_year = adopted.queries["byYear"]
    assert [(a.name, a.type) for a in by_year.arguments] == [("inputYear", "integer")]
    assert by_year.expression == "yearOfBirth == inputYear"
    status = dataset.schemas["petstore.DogYearStatus"]
    assert status.data_columns() == ["name", "yearOfBirth", "status"]


def test_using_queries_example_DogQuery_declares_its_name_argument() -> None:
    query = parse(DOG, DOG_QUERY).schemas["petstore.DogQuery"]
    assert [(a.name, a.type) for a in query.arguments] == [("name", "string")]
    assert query.sql == "SELECT * FROM @{dog} WHERE name=${name}"


def test_petstore_dataset_file_holds_every_seed_schema() -> None:
    dataset = load_dataset("petstore", ROOT / "streaming" / "resources" / "petstore.yaml")
    assert dataset.name == "petstore"
    assert {name: s.kind for name, s in dataset.schemas.items()} == {
        "petstore.Dog": "object",
        "petstore.DogChange": "object",
        "petstore.NextDogAge": "query",
        "petstore.DogChangeStats": "view",
        "petstore.DogChangeStatsAudit": "object",
        "petstore.DogWithYear": "object",
        "petstore.AdoptedDogs": "view",
        "petstore.DogYearStatus": "object",
        "petstore.DogQuery": "query",
    }
    assert dataset.get("petstore.Dog") is dataset.schemas["petstore.Dog"]
    assert dataset.get("petstore.Cat") is None


@pytest.mark.parametrize(
    ("definition", "expected"),
    [
        ({"type": "string"}, StringType()),
        ({"type": "integer"}, LongType()),
        ({"type": "number"}, DoubleType()),
        ({"type": "boolean"}, BooleanType()),
        ({"type": "date"}, DateType()),
        ({"type": "datetime"}, TimestampType()),
        ({"type": "timestamp!"}, TimestampType()),
        ({"type": "decimal"}, DecimalType(38, 9)),
        ({"type": "binary"}, BinaryType()),
        ({"type": "array", "items": {"type": "string"}}, ArrayType(StringType())),
        ({"type": "map", "values": {"type": "integer"}}, MapType(StringType(), LongType())),
        (
            {
                "type": "object",
                "properties": {
                    "x": {"type": "number"},
                    "tags": {"type": "array", "items": {"type": "date"}},
                },
            },
            StructType(
                [StructField("x", DoubleType()), StructField("tags", ArrayType(DateType()))]
            ),
        ),
    ],
)
def test_property_types_map_to_spark_types(
    definition: dict[str, object], expected: DataType
) -> None:
    assert spark_type(PropertyDef.model_validate(definition)) == expected


def test_cdc_keys_and_per_schema_column_defaults() -> None:
    dataset = parse(
        """
sales.Order:
  properties:
    status: {type: string}
    day: {type: date}
    seq: {type: integer}
    gone: {type: string}
  watermark: [day, seq]
  tombstone: {column: gone, value: "Y"}
  history: false
  columnFormat: upper_snake
  columnMapping: {status: ORDER_STATE}
"""
    )
    order = dataset.schemas["sales.Order"]
    assert order.watermark == ["day", "seq"] and not order.history
    assert order.tombstone == TombstoneKey(column="gone", value="Y")
    assert order.column_format is ColumnFormat.UPPER_SNAKE
    assert order.column_mapping == {"status": "ORDER_STATE"}


def test_external_schema_has_a_location_and_format() -> None:
    text = "ext.Source:\n  type: external\n  location: s3://bucket/x\n  format: PARQUET\n"
    source = parse(text).schemas["ext.Source"]
    assert (source.kind, source.location, source.format) == ("external", "s3://bucket/x", "PARQUET")


def test_unknown_type_names_the_key_path() -> None:
    text = "petstore.Dog:\n  properties:\n    age: {type: integr}\n"
    assert problem(text) == "petstore.Dog.properties.age.type: unknown type 'integr'"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("p.Dog: {propertees: {}}", "p.Dog.propertees: unknown key"),
        (
            "p.Dog: {properties: {name: {type: string, lenght: 3}}}",
            "p.Dog.properties.name.lenght: unknown key",
        ),
        ("p.Dog: {properties: {name: {}}}", "p.Dog.properties.name.type: required key missing"),
        ("p.Dog: {name: Dog}", "p.Dog.name: unknown key"),
        ("p.Dog: {type: table}", "p.Dog.type: Input should be"),
        (
            "p.Dog: {properties: {my-name: {type: string}}}",
            "p.Dog.properties.my-name: 'my-name' is not a valid name",
        ),
        (
            "p.Dog: {properties: {tags: {type: array}}}",
            "p.Dog.properties.tags: type array needs 'items'",
        ),
        (
            "p.Dog: {properties: {n: {type: string, items: {type: string}}}}",
            "p.Dog.properties.n: 'items' is only for type array",
        ),
        (
            "p.V: {type: view, sql: 'SELECT 1', using: {d: p.Nope}}",
            "p.V.using.d: unknown schema 'p.Nope'",
        ),
        (
            "p.Dog: {properties: {name: {type: string}}, watermark: [ts]}",
            "p.Dog.watermark: 'ts' is not a primitive data column",
        ),
        (
            "p.Dog: {properties: {name: {type: string}}, watermark: [id]}",
            "p.Dog.watermark: 'id' is not a primitive data column",
        ),
        (
            "p.Dog: {properties: {name: {type: string}}, tombstone: {column: x}}",
            "p.Dog.tombstone.column: 'x' is not a primitive data column",
        ),
        (
            "p.Dog: {properties: {gone: {type: boolean}}, tombstone: {column: gone, value: Y}}",
            "p.Dog.tombstone.value: only a string column",
        ),
        (
            "p.V: {type: view, sql: 'SELECT 1', primaryKey: [id]}",
            "p.V.primaryKey: unknown column 'id'",
        ),
        (
            "p.Dog: {properties: {name: {type: string}}, columnMapping: {nme: NAME}}",
            "p.Dog.columnMapping.nme: unknown column",
        ),
        ("p.Dog: {columnFormat: SHOUTING}", "p.Dog.columnFormat: Input should be"),
        ("p.Dog: {sql: 'SELECT 1'}", "p.Dog.sql: not allowed in object schemas"),
        ("p.V: {type: view}", "p.V.sql: required for a view schema"),
        ("p.E: {type: external}", "p.E.location: required for an external schema"),
        ("p.V: {type: view, sql: 'SELECT * FROM @{dog}'}", "p.V.sql: @{dog} is not a key of using"),
        ("p.Q: {type: query, sql: 'SELECT ${x}'}", "p.Q.sql: ${x} is not a declared argument"),
        (
            "p.Q: {type: query, sql: 'SELECT 1', arguments: [{name: a, type: strin}]}",
            "p.Q.arguments[0].type: unknown type 'strin'",
        ),
        (
            "p.D: {queries: {q: {expression: a,"
            " arguments: [{name: a, type: string}, {name: a, type: string}]}}}",
            "p.D.queries.q.arguments: an argument name is declared twice",
        ),
        ("p.Dog: {properties: {version: {type: integer}}}", "p.Dog.properties.version: reserved"),
        (
            "p.Dog: {properties: {id: {type: integer}}}",
            "p.Dog.properties.id.type: an object's id is a string",
        ),
        (
            "p.Dog: {properties: {name: {type: string}, Name: {type: string}}}",
            "p.Dog.properties.Name: declared twice",
        ),
        (
            "p.A: {type: view, sql: 'SELECT 1', using: {b: p.B}}\n"
            "p.B: {type: view, sql: 'SELECT 1', using: {a: p.A}}",
            "circular reference p.A -> p.B -> p.A",
        ),
        ("p.Dog: {properties: {on: {type: boolean}}}", "boolean: quote it"),
        ("Dog: {properties: {}}", "'Dog': not a fully-qualified schema name"),
        ("p.../Dog: {}", "'p.../Dog': not a fully-qualified schema name"),
        ("p.Dog: [name]", "p.Dog: a schema definition is a mapping"),
    ],
)
def test_wrong_definitions_fail_naming_the_key(text: str, expected: str) -> None:
    assert expected in problem(text)


def test_every_problem_is_reported_at_once() -> None:
    message = problem(
        "p.A: {propertees: {}}\np.B: {properties: {n: {type: strng}}, watermark: [w]}\n"
    )
    assert message.split("; ") == [
        "p.A.propertees: unknown key",
        "p.B.properties.n.type: unknown type 'strng'",
    ]


def test_a_document_that_is_not_a_mapping_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "petstore.yaml"
    path.write_text("- petstore.Dog\n")
    with pytest.raises(
        ConfigError, match=re.escape(f"{path}: dataset petstore: must be a mapping")
    ):
        load_dataset("petstore", path)


def test_a_yaml_syntax_error_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "petstore.yaml"
    path.write_text("petstore.Dog:\n  properties: {name: {type: string}\n")
    with pytest.raises(ConfigError, match=re.escape(f"{path}: not valid YAML")):
        load_dataset("petstore", path)


def test_a_key_given_twice_is_a_yaml_error(tmp_path: Path) -> None:
    path = tmp_path / "petstore.yaml"
    path.write_text(DOG + DOG)
    with pytest.raises(ConfigError, match=re.escape("key 'petstore.Dog' given twice")):
        load_dataset("petstore", path)


def test_yaml_merge_keys_still_work(tmp_path: Path) -> None:
    path = tmp_path / "petstore.yaml"
    path.write_text(
        "p.Dog:\n  properties: &props\n    name: {type: string}\n"
        "p.Cat:\n  properties:\n    <<: *props\n    lives: {type: integer}\n"
    )
    assert load_dataset("p", path).schemas["p.Cat"].data_columns() == ["name", "lives"]


def test_a_missing_file_names_the_config_key(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"datasets\.petstore: cannot read"):
        load_dataset("petstore", tmp_path / "absent.yaml")


def test_errors_in_a_file_name_the_file_and_the_key(tmp_path: Path) -> None:
    path = tmp_path / "petstore.yaml"
    path.write_text("petstore.Dog:\n  properties:\n    age: {type: integr}\n")
    with pytest.raises(ConfigError) as caught:
        load_dataset("petstore", path)
    assert (
        caught.value.message == f"{path}: petstore.Dog.properties.age.type: unknown type 'integr'"
    )


def test_a_decimal_takes_its_precision_and_scale_from_the_definition() -> None:
    from pyspark.sql.types import DecimalType

    from streaming.storage.schemas import spark_schema

    dataset = parse_dataset(
        "shop",
        {
            "shop.Item": {
                "properties": {
                    "price": {"type": "decimal", "precision": 10, "scale": 2},
                    "weight": {"type": "decimal"},
                }
            }
        },
    )
    types = {f.name: f.dataType for f in spark_schema(dataset.schemas["shop.Item"]).fields}
    assert types == {"price": DecimalType(10, 2), "weight": DecimalType(38, 9)}


@pytest.mark.parametrize(
    ("definition", "why"),
    [
        ({"type": "number", "precision": 10, "scale": 2}, "only for type decimal"),
        ({"type": "decimal", "precision": 10}, "together"),
        ({"type": "decimal", "precision": 4, "scale": 6}, "more than precision"),
        ({"type": "decimal", "precision": 39, "scale": 2}, "less than or equal to 38"),
    ],
)
def test_a_wrong_decimal_size_stops_the_job_naming_the_property(
    definition: dict[str, object], why: str
) -> None:
    with pytest.raises(ConfigError, match=why) as raised:
        parse_dataset("shop", {"shop.Item": {"properties": {"price": definition}}})
    assert "price" in raised.value.message
