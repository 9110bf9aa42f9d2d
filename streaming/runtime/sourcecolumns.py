"""A change feed's new source columns, by its ``schema_changes`` policy, before its ready
transactions are applied (``core.sourceschema`` decides; ``storage.evolved`` writes)."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import SparkSession

from streaming.core.catalog import Dataset
from streaming.core.changefeed import Feed
from streaming.core.layout import Layout
from streaming.core.sourceschema import (
    absent_warning,
    definition_text,
    evolved,
    ignored_warning,
    schema_changed,
    source_changes,
    type_changed,
)
from streaming.storage.evolved import add_properties

__all__ = ["SourceColumns"]

log = logging.getLogger(__name__)


@dataclass
class SourceColumns:
    spark: SparkSession
    layout: Layout
    warned: set[tuple[str, str, str]] = field(default_factory=set)
    """(feed, schema, column) of the columns left out that a warning named (one each)."""
    absent_named: set[tuple[str, str, str]] = field(default_factory=set)
    """(feed, schema, property) of the properties no column feeds that a warning named."""

    def follow(
        self,
        feed: Feed,
        datasets: Mapping[str, Dataset],
        events: Sequence[Any],
        batch_id: int,
    ) -> Mapping[str, Dataset]:
        """The definitions the feed's ready transactions apply with — ``events``: the shapes
        their events came in (``table``, ``row``, ``fields``, ``where``, in the order they
        apply; ``inputs.changefeeds.Shape``) — ``datasets``, and with
        ``schema_changes: evolve`` the new columns as properties (their columns added to the
        tables). Raises ``SOURCE_TYPE_CHANGED`` for a column whose type no longer fits, and with
        ``fail`` ``SOURCE_SCHEMA_CHANGED`` for a new column: the batch stops before it applies
        anything."""
        dataset = datasets.get(feed.dataset)
        if dataset is None:
            return datasets
        filled = [feed.position_property, *([feed.time_property] if feed.time_property else [])]
        changes = source_changes(feed.name, dataset, feed.tables, events, filled)
        for absent in changes.absent:
            key = (feed.name, absent.schema, absent.property)
            if key not in self.absent_named:
                self.absent_named.add(key)
                log.warning("%s", absent_warning(absent))
        if changes.conflicts:
            raise type_changed(changes.conflicts)
        if not changes.new:
            return datasets
        if feed.schema_changes == "fail":
            raise schema_changed(changes.new)
        added = [c for c in changes.new if feed.schema_changes == "evolve" and c.usable]
        for column in changes.new:
            key = (feed.name, column.schema, column.column)
            if column not in added and key not in self.warned:
                self.warned.add(key)
                log.warning("%s", ignored_warning(column, feed.schema_changes))
        if not added:
            return datasets
        grown = evolved(datasets, added)
        add_properties(self.spark, self.layout, grown, added, batch_id)
        for column in added:
            log.warning(
                "change feed %r: column %r of source table %s (%s) added to %s as the property "
                "`%s: %s` (kafka.change_feeds[].schema_changes: evolve; recorded in %s; to "
                "make it part of the dataset file, add it there as written here)",
                feed.name,
                column.column,
                column.source_table,
                column.type.connect,
                column.schema,
                column.column,
                definition_text(column.property),
                self.layout.evolved,
            )
        return grown
