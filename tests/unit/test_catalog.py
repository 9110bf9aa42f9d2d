"""Dataset definitions in the seed's schema YAML syntax."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from pyspark.sql.types import LongType, StringType

from streaming.catalog import load_dataset, parse_dataset
from streaming.errors import ConfigError

PETSTORE = Path(__file__).resolve().parents[2] / "streaming" / "resources" / "petstore.yaml"


def test_every_petstore_schema_of_the_seed_loads_with_its_kind() -> None:
    dataset = load_dataset("petstore", PETSTORE)
    kinds = {name: s.kind for name, s in dataset.schemas.items()}
    assert kinds == {
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
    stats = dataset.schemas["petstore.DogChangeStats"]
    assert stats.materialized and stats.primary_key == ["id"]
    assert stats.using == {"dogChange": "petstore.DogChange"}
    query = dataset.schemas["petstore.DogChange"].queries["withStatus"]
    assert query.expression == "status == inputStatus"
    assert [(a.name, a.type) for a in query.arguments] == [("inputStatus", "string")]
    assert dataset.schemas["petstore.NextDogAge"].properties["id"].is_required


def test_object_schema_spark_types_and_id_is_a_meta_column() -> None:
    dataset = parse_dataset(
        "p", {"p.Audit": {"properties": {"id": {"type": "string"}, "total": {"type": "integer"}}}}
    )
    schema = dataset.schemas["p.Audit"]
    assert schema.data_columns() == ["total"]
    assert [(f.name, f.dataType) for f in schema.spark_schema().fields] == [("total", LongType())]
    assert schema.path_parts == ["p", "Audit"] and schema.short_name == "Audit"
    assert dataset.schemas["p.Audit"].properties["id"].spark_type() == StringType()


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("p.Dog: {properties: {name: {type: strng}}}", "p.Dog.properties.name"),
        ("p.Dog: {propertees: {}}", "p.Dog.propertees: unknown key"),
        ("p.V: {type: view, sql: 'SELECT 1', using: {d: p.Nope}}", "p.V.using.d"),
        ("p.Dog: {properties: {name: {type: string}}, watermark: [ts]}", "p.Dog.watermark"),
        ("p.Dog: {properties: {name: {type: string}}, tombstone: {column: x}}", "p.Dog.tombstone"),
        ("Dog: {properties: {}}", "fully qualified"),
    ],
)
def test_wrong_definitions_fail_naming_the_key(text: str, named: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_dataset("p", yaml.safe_load(text))
    assert named in str(caught.value)
