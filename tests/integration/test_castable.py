"""``loads._castable`` answers without analysing a plan for the casts Spark always allows: each
such answer must be one Spark's analyser gives too."""

from __future__ import annotations

from decimal import Context, Decimal

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    ByteType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    StructField,
    StructType,
    TimestampType,
    VariantType,
)

from streaming.inputs.jsonfiles import rounded
from streaming.inputs.loads import _always_castable, _castable

pytestmark = pytest.mark.spark

TYPES: list[DataType] = [
    BooleanType(),
    ByteType(),
    ShortType(),
    IntegerType(),
    LongType(),
    FloatType(),
    DoubleType(),
    DecimalType(12, 2),
    StringType(),
    DateType(),
    TimestampType(),
    ArrayType(LongType()),
]


def test_what_needs_no_analysis_is_what_spark_allows(spark: SparkSession) -> None:
    raw = spark.createDataFrame(
        [], StructType([StructField(f"c{i}", t) for i, t in enumerate(TYPES)])
    )
    shortcut = 0
    for i, source in enumerate(TYPES):
        for target in TYPES:
            if not _always_castable(source, target):
                continue
            shortcut += 1
            raw.select(F.col(f"c{i}").try_cast(target))  # raises if Spark refuses the cast
            assert _castable(raw, f"c{i}", target)
    assert shortcut == 7 * 8 + 9  # number/text → 7 numbers; 7 numbers, text, boolean → text
    assert not _always_castable(DateType(), IntegerType())
    assert not _always_castable(ArrayType(LongType()), StringType())


ROUNDING = [
    # (text, scale, whether a cast to that scale drops a non-zero digit), checked against
    # Python's exact Decimal below
    ("1.5", 1, False),
    ("1.50", 1, False),
    ("1.55", 1, True),
    ("-0.0000000001", 10, False),
    ("-0.00000000001", 10, True),
    ("15e-1", 1, False),
    ("15e-2", 1, True),
    ("1.5E3", 0, False),
    ("1200", 0, False),
    ("1.2345678901234568E40", 2, False),
    ("99999999999999999999999999.9999999999", 10, False),
    ("99999999999999999999999999.99999999999", 10, True),
    ("0.000", 0, False),
    (" 7.10 ", 1, False),
]


@pytest.mark.parametrize("source", ["string", "variant"])
def test_a_decimal_cast_that_would_round_is_found(spark: SparkSession, source: str) -> None:
    """``rounded`` finds every value a decimal property could take only rounded (issue 57:
    Spark's cast rounds half up without a word), from text and from a JSON document's variant,
    and no value it takes exactly."""
    for text, scale, lost in ROUNDING:  # the table itself, by Python's exact arithmetic
        exact = Decimal(text.strip())
        step = Decimal(1).scaleb(-scale)
        assert (exact != exact.quantize(step, context=Context(prec=80))) == lost, text
    frame = spark.createDataFrame([(t, s) for t, s, _ in ROUNDING], "text string, scale int")
    column = F.col("text")
    value, kind = (
        (column, StringType()) if source == "string" else (F.parse_json(column), VariantType())
    )
    found = []
    for scale in sorted({s for _, s, _ in ROUNDING}):
        target = DecimalType(38, scale)
        cast = (
            value.try_cast(target)
            if source == "string"
            else F.try_variant_get(value, "$", target.simpleString())
        )
        checked = frame.where(F.col("scale") == scale).select(
            "text", rounded(value, kind, cast, target).alias("lost")
        )
        found += [(r["text"], scale, r["lost"]) for r in checked.collect()]
    assert sorted(found) == sorted(ROUNDING)


def test_a_number_cast_to_a_smaller_scale_that_would_round_is_found(spark: SparkSession) -> None:
    """Floats and wider decimals (DMS's Parquet columns) are checked by casting back."""
    frame = spark.createDataFrame(
        [(1.25, Decimal("1.2500")), (1.255, Decimal("1.2550")), (3.0, Decimal("3.0001"))],
        "d double, n decimal(10,4)",
    )
    target = DecimalType(10, 2)
    checked = frame.select(
        rounded(F.col("d"), DoubleType(), F.col("d").try_cast(target), target).alias("d"),
        rounded(F.col("n"), DecimalType(10, 4), F.col("n").try_cast(target), target).alias("n"),
    ).collect()
    assert [(r["d"], r["n"]) for r in checked] == [(False, False), (True, True), (False, True)]
