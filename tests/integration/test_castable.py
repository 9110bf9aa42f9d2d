"""``loads._castable`` answers without analysing a plan for the casts Spark always allows: each
such answer must be one Spark's analyser gives too."""

from __future__ import annotations

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
)

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
