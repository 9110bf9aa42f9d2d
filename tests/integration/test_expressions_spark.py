"""Named-query expressions compiled to Spark Columns: exactly which rows each one keeps."""

from __future__ import annotations

from datetime import date, datetime
from decimal import Decimal
from typing import Any

import pytest
import yaml
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from streaming.core.catalog import QueryArgument, parse_dataset
from streaming.core.errors import RejectedError
from streaming.core.expressions import bind_arguments, check_expression, parse_expression
from streaming.inputs.filters import query_filter, to_column

pytestmark = pytest.mark.spark

INJECTION = "x' OR '1'='1"
SCHEMA = StructType(
    [
        StructField("id", StringType()),
        StructField("status", StringType()),
        StructField("name", StringType()),
        StructField("age", LongType()),
        StructField("price", DoubleType()),
        StructField("total", DecimalType(38, 9)),
        StructField("good", BooleanType()),
        StructField("day", DateType()),
        StructField("seen", TimestampType()),
        StructField("tags", ArrayType(StringType())),
        StructField("owner", StructType([StructField("city", StringType())])),
    ]
)
# fmt: off
ROWS = [
    ("dog1", "ready", "Scooby", 5, 10.5, Decimal("1.5"), True, date(2021, 1, 1),
     datetime(2021, 1, 1, 10, 0), ["a", "b"], ("Paris",)),
    ("dog2", "ready", "Lassie", 3, 3.0, Decimal("2"), False, date(2021, 6, 1),
     datetime(2021, 6, 1, 10, 0), ["b"], ("Lyon",)),
    ("dog3", "pending", "Clifford", None, None, None, None, None, None, [], None),
    ("dog4", None, "Rex", 8, 7.25, Decimal("0"), None, date(2022, 1, 1),
     datetime(2022, 1, 1, 0, 0), None, (None,)),
    ("dog5", INJECTION, "Bobby", 2, 1.0, Decimal("1"), None, None, None, None, None),
]
# fmt: on
FIELDS = {
    "id": "string",
    "status": "string",
    "name": "string",
    "age": "integer",
    "price": "number",
    "total": "decimal",
    "good": "boolean",
    "day": "date",
    "seen": "datetime",
    "tags": "array",
    "owner": "object",
    "owner.city": "string",
}
ALL = ["dog1", "dog2", "dog3", "dog4", "dog5"]


@pytest.fixture(scope="module")
def dogs(spark: SparkSession) -> DataFrame:
    return spark.createDataFrame(ROWS, SCHEMA)


def kept(
    dogs: DataFrame, text: str, declared: dict[str, str] | None = None, **given: Any
) -> list[str]:
    """The ids of the rows the expression keeps, after the same checks a request gets."""
    expr = parse_expression(text)
    check_expression(expr, FIELDS, declared or {})
    arguments = [QueryArgument(name=n, type=t) for n, t in (declared or {}).items()]
    bound = bind_arguments(arguments, given, "test", expression=expr)
    rows = dogs.filter(to_column(expr, F.col, bound)).select("id").collect()
    return sorted(row.id for row in rows)


def test_seed_withStatus_keeps_the_dogs_with_the_given_status(dogs: DataFrame) -> None:
    text = """
petstore.DogChange:
  properties: {status: {type: string}, name: {type: string}}
  queries:
    withStatus:
      arguments: [{name: inputStatus, type: string}]
      expression: status == inputStatus
"""
    query = parse_dataset("petstore", yaml.safe_load(text)).schemas["petstore.DogChange"]
    with_status = query.queries["withStatus"]

    def ids(status: str) -> list[str]:
        where = "actions[0] query withStatus"
        condition = query_filter(with_status, {"inputStatus": status}, F.col, where)
        return sorted(r.id for r in dogs.filter(condition).select("id").collect())

    assert ids("ready") == ["dog1", "dog2"]
    assert ids("pending") == ["dog3"]
    with pytest.raises(RejectedError) as caught:
        query_filter(with_status, {"inputStatus": 1}, F.col, "actions[0] query withStatus")
    assert caught.value.code == "ARGUMENT_TYPE_MISMATCH"


def test_seed_byYear_compares_an_integer_field_with_an_integer_argument(dogs: DataFrame) -> None:
    assert kept(dogs, "age == inputAge", {"inputAge": "integer"}, inputAge=5) == ["dog1"]


def test_in_a_list_literal(dogs: DataFrame) -> None:
    assert kept(dogs, "status in ['ready', 'pending']") == ["dog1", "dog2", "dog3"]
    assert kept(dogs, "age in [3, 8, null]") == ["dog2", "dog4"]
    assert kept(dogs, "status in []") == []
    assert kept(dogs, "age + 1 in [age * 2 - 4]") == ["dog1"]  # items may be expressions


def test_in_a_list_argument_and_in_an_array_field(dogs: DataFrame) -> None:
    statuses = {"statuses": "string"}
    assert kept(dogs, "status in statuses", statuses, statuses=["pending", INJECTION]) == [
        "dog3",
        "dog5",
    ]
    assert kept(dogs, "status in statuses", statuses, statuses=[]) == []
    assert kept(dogs, "'b' in tags") == ["dog1", "dog2"]
    assert kept(dogs, "name in tags") == []


def test_not_in_follows_sql_semantics_for_null_values(dogs: DataFrame) -> None:
    assert kept(dogs, "!(status in ['ready'])") == ["dog3", "dog5"]  # dog4's null status: unknown


def test_arithmetic(dogs: DataFrame) -> None:
    assert kept(dogs, "age * 2 + 1 > 10") == ["dog1", "dog4"]
    assert kept(dogs, "age % 2 == 1") == ["dog1", "dog2"]
    assert kept(dogs, "age / 2 >= 2.5") == ["dog1", "dog4"]
    assert kept(dogs, "age - 1 - 1 == 1") == ["dog2"]  # left-associative
    assert kept(dogs, "-age < -4") == ["dog1", "dog4"]
    assert kept(dogs, "price - 0.5 == 10") == ["dog1"]
    assert kept(dogs, "total * 2 == 3") == ["dog1"]
    assert kept(dogs, "(age + 1) * 2 == 12 || age + 1 * 2 == 5") == ["dog1", "dog2"]


def test_division_by_zero_and_overflow_give_null_not_a_failure(dogs: DataFrame) -> None:
    assert kept(dogs, "age / 0 > 1") == []
    assert kept(dogs, "age / 0 == null") == ALL
    assert kept(dogs, "age % 0 == null") == ALL
    assert kept(dogs, "age * 9223372036854775807 == null") == ALL


def test_null_literal_and_null_arguments_test_for_null(dogs: DataFrame) -> None:
    assert kept(dogs, "status == null") == ["dog4"]
    assert kept(dogs, "null != status") == ["dog1", "dog2", "dog3", "dog5"]
    assert kept(dogs, "status == s", {"s": "string"}, s=None) == ["dog4"]
    assert kept(dogs, "status != s", {"s": "string"}, s=None) == ["dog1", "dog2", "dog3", "dog5"]
    assert kept(dogs, "owner.city == null") == ["dog3", "dog4", "dog5"]


def test_comparisons_with_a_null_column_value_keep_nothing(dogs: DataFrame) -> None:
    assert kept(dogs, "status != 'ready'") == ["dog3", "dog5"]
    assert kept(dogs, "age > 0") == ["dog1", "dog2", "dog4", "dog5"]


def test_booleans(dogs: DataFrame) -> None:
    assert kept(dogs, "good") == ["dog1"]
    assert kept(dogs, "!good") == ["dog2"]
    assert kept(dogs, "good == false || age > 7 && true") == ["dog2", "dog4"]


def test_dates_and_date_times(dogs: DataFrame) -> None:
    assert kept(dogs, "day >= '2021-06-01'") == ["dog2", "dog4"]
    assert kept(dogs, "day == since", {"since": "date"}, since="2021-01-01") == ["dog1"]
    assert kept(dogs, "seen > since", {"since": "datetime"}, since="2021-06-01T09:00:00") == [
        "dog2",
        "dog4",
    ]
    assert kept(dogs, "seen < '2021-01-01T10:00:01' && day <= seen") == ["dog1"]
    assert kept(dogs, "day in ['2021-01-01', '2022-01-01']") == ["dog1", "dog4"]
    assert kept(dogs, "day in days", {"days": "date"}, days=["2021-06-01", None]) == ["dog2"]


def test_nested_field(dogs: DataFrame) -> None:
    assert kept(dogs, "owner.city == 'Paris' || owner.city == 'Lyon'") == ["dog1", "dog2"]


def test_sql_in_argument_values_is_matched_as_a_plain_value(
    spark: SparkSession, dogs: DataFrame
) -> None:
    dogs.createOrReplaceTempView("t")
    s = {"s": "string"}
    assert kept(dogs, "status == s", s, s=INJECTION) == ["dog5"]  # only the literal row
    assert kept(dogs, "status == s", s, s="1; DROP TABLE t") == []
    assert kept(dogs, "name == s || status == s", s, s="ready' OR 1=1 --") == []
    assert kept(dogs, "name in s", s, s=["Scooby'); DROP TABLE t; --", "' OR ''='"]) == []
    assert spark.catalog.tableExists("t") and spark.table("t").count() == len(ROWS)
