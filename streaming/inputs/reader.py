"""Reading the rows of schemas and tables — the sources of source-schema actions.

Every table is read at the version the batch's timeline gives (``version``): the state after the
batch's earlier steps, the same again when a batch is replayed after a crash.

- object, record and materialized-view schemas: their Delta table;
- view and query schemas: their ``sql``, where ``@{ref}`` and a bare ``ref`` name the schema
  ``using`` maps it to, and ``${arg}`` is a named parameter (``:arg``) bound by Spark, never
  pasted into the SQL text. A schema's columns are visible under their names and, where it
  differs, their UPPER_SNAKE spelling (``yearOfBirth`` and ``YEAR_OF_BIRTH``), as the seed's SQL
  writes them;
- external schemas: the files at their ``location`` in their ``format``;
- ``delta:///path`` and ``table://name`` sources: that Delta table or Spark catalog table.

A named query filters the rows with a Spark Column compiled from its expression.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from streaming.core.catalog import ARG_PATTERN, REF_PATTERN, Dataset, SchemaDef
from streaming.core.codes import Code
from streaming.core.columns import ColumnFormat, source_name
from streaming.core.errors import RejectedError
from streaming.core.layout import Layout
from streaming.core.plan import Filter, SchemaRows, TableRows
from streaming.inputs.filters import to_column
from streaming.storage.tables import read_table

__all__ = ["Reader", "column_of", "filtered"]


def column_of(df: DataFrame, name: str) -> Column:
    """The column of ``df`` a query's field ``name`` means: the same name, else the one equal to it
    ignoring case and underscores (``yearOfBirth`` ~ ``YEAR_OF_BIRTH``)."""
    if name in df.columns:
        return df[f"`{name}`"]
    loose = name.replace("_", "").lower()
    matches = [c for c in df.columns if c.replace("_", "").lower() == loose]
    if len(matches) != 1:
        raise RejectedError(
            f"the query's field {name!r} matches columns {matches} of the source",
            code=Code.QUERY_NOT_APPLICABLE,
        )
    return df[f"`{matches[0]}`"]


def filtered(df: DataFrame, query: Filter | None) -> DataFrame:
    """The rows of ``df`` the named query selects (all rows without one)."""
    if query is None:
        return df
    return df.where(to_column(query.expression, lambda name: column_of(df, name), query.arguments))


def _with_sql_names(df: DataFrame) -> DataFrame:
    """Add each column's UPPER_SNAKE spelling where it differs beyond case."""
    extra = [
        F.col(f"`{c}`").alias(snake)
        for c in df.columns
        if (snake := source_name(c, ColumnFormat.UPPER_SNAKE)).lower() != c.lower()
    ]
    return df.select("*", *extra) if extra else df


@dataclass
class Reader:
    spark: SparkSession
    layout: Layout
    datasets: Mapping[str, Dataset]
    base_dir: str
    version: Callable[[str], int | None]
    """Table path → the version to read (None: the latest)."""

    def table(self, path: str) -> DataFrame:
        return read_table(self.spark, path, self.version(path))

    def schema(self, dataset: str, schema: SchemaDef, arguments: Mapping[str, Any]) -> DataFrame:
        """All rows of ``schema`` (of ``dataset``), ``${arg}`` bound to ``arguments``."""
        if schema.kind in ("object", "record") or schema.materialized:
            return self.table(self.layout.table(dataset, schema.name))
        if schema.kind == "external":
            assert schema.location is not None
            location = schema.location
            if "://" not in location:
                location = os.path.join(self.base_dir, location)
            reader = self.spark.read.format((schema.format or "parquet").lower())
            return reader.option("header", "true").load(location)
        return self.sql(dataset, schema, arguments)

    def sql(
        self,
        dataset: str,
        schema: SchemaDef,
        arguments: Mapping[str, Any],
        inputs: Mapping[str, DataFrame] | None = None,
    ) -> DataFrame:
        """Run a view's or query's SQL over its ``using`` schemas (or the given ``inputs``)."""
        assert schema.sql is not None
        catalog = self.datasets[dataset]
        for ref, fqn in schema.using.items():
            source = (inputs or {}).get(ref)
            if source is None:
                used = catalog.get(fqn)
                assert used is not None  # checked when the dataset was loaded
                source = self.schema(dataset, used, {})
            _with_sql_names(source).createOrReplaceTempView(ref)
        text = REF_PATTERN.sub(lambda m: f"`{m.group(1)}`", schema.sql)
        text = ARG_PATTERN.sub(lambda m: f":{m.group(1)}", text)
        return self.spark.sql(text, args=dict(arguments)) if arguments else self.spark.sql(text)

    def rows(self, source: SchemaRows | TableRows) -> DataFrame:
        """The rows a source-schema or table action reads, filtered by its named query."""
        if isinstance(source, TableRows):
            if source.is_path:
                return self.table(source.name)
            return self.spark.table(source.name)
        df = self.schema(source.dataset, source.schema, source.arguments)
        return filtered(df, source.filter)
