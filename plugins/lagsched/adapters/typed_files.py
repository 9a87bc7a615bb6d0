"""A routed topic's records as the files of its typed table and of the cluster's dead-letter table.

Used inside Spark tasks (`adapters.range_files`), in place of the shared table's `PartitionFiles`
for a partition whose topic has a route (`lagsched.core.routing.TopicRoute`): the records a task
reads are split (`lagsched.core.typed_rows.split_batch`) into typed rows, one set of files per
writer schema (of the value, and of the key where keys are decoded too), and dead letters. Writer
schemas come from the schema registry through one client per Python worker (`RegistryClient`,
which caches each schema id), and each id's decoder is built once per worker.

Whether a writer schema may evolve its table is decided on the driver, once per (table, part,
schema id), and recorded (`adapters.schema_decisions`); the batch carries the decisions known when it
started (`RoutedTables.decisions`). Rows of a schema refused there are dead letters here. A schema
id not decided yet is written as typed rows; the driver decides it before the commit and, if it
refuses it, voids the batch, which is read again with the decision (`adapters.lake_sink`).

A registry that cannot answer fails the task as an outage (``unreachable``): the slot rides it
through, and no record becomes a dead letter for it.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from lagsched.adapters.data_files import (
    CREATED_SCHEMA,
    HOUR_US,
    DataFolder,
    FileSettings,
    PartitionFiles,
    WrittenFile,
    arrow_schema,
)
from lagsched.core.avro_types import UnsupportedSchema
from lagsched.core.errors import ConnectionFailure, RegistryUnreachable
from lagsched.core.evolution import Incompatible
from lagsched.core.routing import TopicRoute
from lagsched.core.typed_rows import DEAD_LETTER_SCHEMA, KEY, VALUE, split_batch

__all__ = ["DEAD_LETTER_COORDINATES", "TYPED_COORDINATES", "RoutedPartitionFiles", "RoutedTables", "TableFiles"]

# A Spark task is one core's work (one task per core): polars' own pool of a thread per core would
# only contend with the other tasks. Read by polars when it is first imported, in this worker.
os.environ.setdefault("POLARS_MAX_THREADS", "1")

#: The topic, partition, offset, timestamp and headers columns of a typed and the dead-letter table.
TYPED_COORDINATES = ("_kafka_topic", "_kafka_partition", "_kafka_offset", "_kafka_timestamp", "_kafka_headers")
DEAD_LETTER_COORDINATES = ("topic", "partition", "offset", "timestamp", "headers")


@dataclass(frozen=True, slots=True)
class TableFiles:
    """Where a typed or dead-letter table's files go: its identifier, location and write properties
    (a table not created yet: the location it will be created at, lagsched's properties)."""

    identifier: str
    location: str
    properties: Mapping[str, str] = field(default_factory=dict)

    def settings(self, schema: pa.Schema, *, dead_letters: bool, s3_endpoint: str | None) -> FileSettings:
        return FileSettings.of_rows(
            self.location,
            schema,
            self.properties,
            coordinates=DEAD_LETTER_COORDINATES if dead_letters else TYPED_COORDINATES,
            topic_in_path=dead_letters,
            s3_endpoint=s3_endpoint,
        )


@dataclass(frozen=True, slots=True)
class RoutedTables:
    """What a batch's tasks need to write routed topics (built on the driver, sent to the tasks).

    Attributes:
        routes: topic -> its route, for the batch's routed topics.
        tables: typed table identifier -> its files' place.
        dead_letters: the cluster's dead-letter table.
        registry: the schema registry's Connection (SchemaRegistryParams), when a route needs it.
        decisions: (table, part, schema id) -> why the schema was refused for the table; None: accepted.
        schemas: the writer schemas the driver resolved, by id: a task's worker decodes them without
            asking the registry (it may be down; the worker may be new).
    """

    routes: Mapping[str, TopicRoute]
    tables: Mapping[str, TableFiles]
    dead_letters: TableFiles
    registry: Any = None
    decisions: Mapping[tuple[str, str, int], str | None] = field(default_factory=dict)
    schemas: Mapping[int, Any] = field(default_factory=dict)
    catalog: str = "lagsched"
    s3_endpoint: str | None = None

    def identifier_of(self, route: TopicRoute) -> str:
        return f"{self.catalog}.{route.namespace}.{route.table}"


#: The columns the tasks build a routed partition's records in before they are split: the shared table's.
RAW_SCHEMA = arrow_schema(CREATED_SCHEMA)
_lock = threading.Lock()
_clients: dict[Any, Any] = {}
#: (registry URL, schema id, part) -> its decoder, or the permanent error building it gave.
_decoders: dict[tuple[str, int, str], Any] = {}


def registry_client(params: Any) -> Any:
    """The worker's (or driver's) one registry client for `params` (its cache shared by every decoder)."""
    from lagsched.adapters.schema_registry import RegistryClient

    with _lock:
        client = _clients.get(params)
        if client is None:
            client = _clients[params] = RegistryClient(params)
        return client


def decoder_for(route: TopicRoute, registry: Any, schema_id: int, part: str = VALUE) -> Any:
    """The decoder of `route`'s values (`part` VALUE) or keys (KEY, a `KeyDecoder`) written with
    `schema_id` (the route's local id for the ``json`` format), built once per worker. Raises
    UnknownSchemaId or UnsupportedSchema (permanent: dead letters), or RegistryUnreachable."""
    fmt = route.key_format if part == KEY else route.value_format
    declared = route.key_schema if part == KEY else route.value_schema
    if fmt == "raw":
        from lagsched.core.decoded import RawDecoder

        return RawDecoder()
    if fmt == "json":
        key = (f"json:{declared}", 0, part)
    else:
        if registry is None:
            raise ValueError(f"topic {route.topic} is read through a schema registry, but none was configured")
        key = (registry.url, schema_id, part)
    found = _decoders.get(key)
    if found is None:
        found = _decoders[key] = _build(fmt, declared, registry, schema_id, part)
    if isinstance(found, Exception):
        raise found
    return found


def _build(fmt: str, declared: str | None, registry: Any, schema_id: int, part: str) -> Any:
    """A decoder, or the permanent error building it gave (kept: the registry never reuses an id)."""
    import json

    from lagsched.core.errors import UnknownSchemaId

    try:
        if fmt == "json":
            return _decoder("JSON", json.loads(declared or "{}"), part)
        try:
            writer = registry_client(registry).schema(schema_id)
        except ConnectionFailure as exc:
            if exc.permanent:
                raise
            raise RegistryUnreachable(str(exc)) from None
        wanted = "AVRO" if fmt == "avro" else "JSON"
        if writer.schema_type != wanted:
            return UnsupportedSchema(f"schema {schema_id} is {writer.schema_type}, but the route reads {fmt}", path="")
        return _decoder(wanted, json.loads(writer.text) if wanted == "AVRO" else writer.parsed(), part)
    except (UnknownSchemaId, UnsupportedSchema) as exc:
        return exc


def _decoder(kind: str, schema: Any, part: str) -> Any:
    """The decoder of an Avro (``kind`` AVRO) or JSON schema (parsed), of values or of keys."""
    import json

    from lagsched.core import key_decode
    from lagsched.core.avro_decode import AvroDecoder
    from lagsched.core.json_decode import JsonDecoder

    if kind == "AVRO":
        if part == KEY:
            return key_decode.KeyDecoder(AvroDecoder(json.dumps(key_decode.wrap_avro(schema))))
        return AvroDecoder(json.dumps(schema))
    if part == KEY:
        return key_decode.KeyDecoder(JsonDecoder(key_decode.wrap_json_schema(schema)), json_text=True)
    return JsonDecoder(schema)


class RoutedPartitionFiles:
    """One routed partition's files in one task: typed files per writer schema (and key writer
    schema), and dead letters.

    The same calls as `PartitionFiles` (``add``, ``close``, ``abandon``, ``written``), taking the
    records as the shared table's columns.
    """

    def __init__(self, route: TopicRoute, partition: int, tables: RoutedTables) -> None:
        self.route, self.partition, self._tables = route, partition, tables
        self.table = tables.identifier_of(route)
        self._typed_place = tables.tables[self.table]
        self._folders: dict[str, DataFolder] = {}
        self._typed: dict[tuple[int, int], PartitionFiles] = {}
        self._dead: PartitionFiles | None = None
        self.raw_schema = RAW_SCHEMA
        if tables.schemas and tables.registry is not None:
            registry_client(tables.registry).seed(tables.schemas)

    def add(self, raw: pa.RecordBatch, hours: np.ndarray[Any, Any]) -> None:
        """Records of this partition (the shared table's columns) in offset order; `hours` unused:
        each table's rows take their own hours."""
        del hours
        split = split_batch(raw, self.route, self._decoder, target=self.table)
        split.check(raw.column("offset").to_numpy())
        for rows in split.typed:
            writers = (rows.schema_id, rows.key_schema_id)
            files = self._typed.get(writers)
            if files is None:
                files = self._typed[writers] = self._files(self._typed_place, rows.batch.schema, writers)
            files.add(rows.batch, _hours(rows.batch.column("_kafka_timestamp")))
        if split.dead is not None:
            if self._dead is None:
                self._dead = self._files(self._tables.dead_letters, DEAD_LETTER_SCHEMA, None)
            self._dead.add(split.dead, _hours(split.dead.column("timestamp")))

    def _decoder(self, part: str, schema_id: int) -> Any:
        refused = self._tables.decisions.get((self.table, part, schema_id))
        if refused is not None:
            raise Incompatible(refused, path="")
        return decoder_for(self.route, self._tables.registry, schema_id, part)

    def _files(self, place: TableFiles, schema: pa.Schema, writers: tuple[int, int] | None) -> PartitionFiles:
        dead = place is self._tables.dead_letters
        settings = place.settings(schema, dead_letters=dead, s3_endpoint=self._tables.s3_endpoint)
        folder = self._folders.get(settings.data_location)
        if folder is None:
            folder = self._folders[settings.data_location] = DataFolder(settings.data_location, settings.s3_endpoint)
        schema_id, key_schema_id = writers if writers is not None else (None, None)
        return PartitionFiles(
            folder,
            self.route.topic,
            self.partition,
            settings,
            table=place.identifier,
            schema_id=schema_id,
            key_schema_id=key_schema_id,
        )

    def _all(self) -> list[PartitionFiles]:
        return [*self._typed.values(), *([self._dead] if self._dead is not None else [])]

    def close(self) -> None:
        for files in self._all():
            files.close()

    def abandon(self) -> list[str]:
        """Stop writing and delete every file begun or written (they are in other folders than the
        shared table's, so deleted here); nothing left to delete."""
        for files in self._all():
            uris = files.abandon()
            if uris:
                self._folders[files.folder_uri].delete(uris)
        return []

    @property
    def written(self) -> list[WrittenFile]:
        return [f for files in self._all() for f in files.written]


def _hours(timestamps: pa.Array) -> np.ndarray[Any, Any]:
    hours: np.ndarray[Any, Any] = np.floor_divide(timestamps.cast(pa.int64()).to_numpy(), HOUR_US)
    return hours
