"""A cluster's lake as a batch sees it: the shared table, the typed tables of its routes and the
dead-letter table, each committed exactly once (docs/lake.md, "Several tables").

`LakeSink` has the shared table's calls (`adapters.sink.IcebergSink`: mark, present, commit,
delete), for all of them at once:

* **mark**: the current snapshot of each table the batch's topics can land in, before its ranges are recorded;
* **present** (a redo): which tables hold records of each recorded range already;
* **prepare** (before the ranges are recorded): each typed table the batch writes is created on
  its first records, and each new writer schema is decided (`adapters.schema_decisions`): the
  table evolves (Iceberg's ``UpdateSchema``, field ids kept) or the schema is refused, and the
  batch is read again so that its records go to the dead-letter table;
* **commit**: one conditional commit per table, each recording the ranges whose records it got
  and refused if another holder committed records of them to *that* table since the mark.

Why per table is exactly once: decoding is deterministic given a schema id (which a registry
never reuses) and the recorded decision, so every holder of a range splits it the same way; each
table then holds each range's part at most once (its own conflict check) and at least once
(offsets move only after every table's commit, and a redo commits to each table what it lacks).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lagsched.adapters import schema_decisions, watermarks
from lagsched.adapters.clock import SYSTEM_CLOCK
from lagsched.adapters.data_files import WrittenFile, max_timestamps
from lagsched.adapters.late_records import LateRecords
from lagsched.adapters.sink import (
    DEAD_LETTERS,
    KEY_SCHEMA_IDS_PROPERTY,
    NAME_MAPPING,
    SCHEMA_IDS_PROPERTY,
    TYPED,
    BatchRead,
    IcebergSink,
    SinkConflictError,
    TableCommit,
    TableShape,
)
from lagsched.adapters.topics import load_topics
from lagsched.adapters.typed_files import RoutedTables, TableFiles, decoder_for, registry_client
from lagsched.core import evolution
from lagsched.core.completeness import DEFAULT_ALLOWED_LATENESS_S, HOUR_MS, hour_complete, hour_key, table_lateness
from lagsched.core.errors import ConfigError, LagschedError
from lagsched.core.iceberg_types import arrow_schema, iceberg_schema, name_mapping
from lagsched.core.lake import (
    LATE_RECORDS_PROPERTY,
    MAX_TIMESTAMPS_PROPERTY,
    TABLE_PROPERTIES,
    VALID_THROUGH_PROPERTY,
    LakeTable,
)
from lagsched.core.routing import Route, TopicRoute, route_topics
from lagsched.core.times import Clock
from lagsched.core.typed_rows import DEAD_LETTER_SCHEMA, FIXED_KEY_TYPES, KEY, VALUE, typed_schema, writer_columns

__all__ = ["LakeSink", "Marks", "Presence", "SchemaRefused", "dead_letter_table"]

log = logging.getLogger(__name__)

Key = tuple[str, int]
#: A typed table's properties at creation: the shared table's, but those of its key and value columns.
TYPED_PROPERTIES = {k: v for k, v in TABLE_PROPERTIES.items() if ".column." not in k}
#: The table property naming the cluster whose slots created a typed table (its table care finds it so).
CLUSTER_PROPERTY = "lagsched.cluster"
#: Each table's snapshot as of the mark (None: empty or not created yet), by identifier.
Marks = dict[str, int | None]


def dead_letter_table(lake: LakeTable) -> str:
    """The cluster's dead-letter table: next to its shared table, ``<table>_dead_letters``.

    >>> from lagsched.core.lake import LakeTable
    >>> dead_letter_table(LakeTable.of("prod", None, default_warehouse="file:/w"))
    'lagsched.kafka.prod_dead_letters'
    """
    return f"{lake.catalog}.{lake.namespace}.{lake.table}_dead_letters"


class SchemaRefused(LagschedError):
    """A writer schema a batch met was refused for its table (`LakeSink.prepare`): nothing of the
    batch was committed, its files are deleted; read again, its records go to the dead-letter table."""


@dataclass(frozen=True, slots=True)
class Presence:
    """Which tables hold records of the recorded ranges of a redo, as of the mark.

    ``skip``: ranges every table they could land in holds (nothing to read again); ``tables``:
    per table, the ranges it holds (files for those are not committed to it again).
    """

    skip: frozenset[Key] = frozenset()
    tables: Mapping[str | None, frozenset[Key]] | None = None

    def lacking(self, files: Sequence[WrittenFile]) -> tuple[list[WrittenFile], list[WrittenFile]]:
        """``files`` split into those for tables lacking their range, and those for tables holding it."""
        keep: list[WrittenFile] = []
        drop: list[WrittenFile] = []
        for f in files:
            held = (self.tables or {}).get(f.table, frozenset())
            (drop if (f.topic, f.partition) in held else keep).append(f)
        return keep, drop


class LakeSink:
    """The cluster's tables behind one committer (see the module doc); one per slot run."""

    def __init__(
        self,
        spark: Any,
        lake: LakeTable,
        *,
        conn: Any,
        slot_id: str,
        routes: Sequence[Route] = (),
        registry: Any = None,
        properties: Mapping[str, str] | None = None,
        count_dead_letters: Callable[[Mapping[str, int]], None] | None = None,
        cluster: str | None = None,
        allowed_lateness_s: int = DEFAULT_ALLOWED_LATENESS_S,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        """``routes``: the cluster's routes (none: the shared table only, as before), applied to the
        topics the slot holds as it learns them (`learn`); ``registry``: the schema registry's
        Connection (SchemaRegistryParams), needed when a route reads the registry's formats;
        ``count_dead_letters`` is told the records each topic committed to the dead-letter table
        (`lagsched.adapters.alert_figures.DeadLetterCounter`: the metric, the alert, the page);
        ``cluster``: the registry's cluster name, whose topics' watermarks each commit records
        (None: no ``lagsched.valid-through-ts`` and no late records; the per-partition timestamps are
        recorded anyway); ``allowed_lateness_s``: the cluster's, for the shared table and the typed
        tables of routes that set none (a record of an hour complete before its commit is late);
        ``clock``: the slot's, which times the commits."""
        self._spark, self._lake, self._conn, self._slot = spark, lake, conn, slot_id
        self._properties = dict(properties or {})
        self._count_dead = count_dead_letters
        self._cluster = cluster
        self._lateness_s = allowed_lateness_s
        self._clock = clock
        self._appended: set[str] = set()  # topics whose timestamps the broker sets (LogAppendTime)
        self._shared_topics: tuple[tuple[str, ...], list[str]] = ((), [])  # the registry's names, the unrouted
        self.shared = IcebergSink(spark, lake, properties=self._properties, clock=clock)
        self._rules = tuple(routes)
        self._registry = registry
        if any(r.needs_registry for r in self._rules) and registry is None:
            raise LagschedError(
                "a route reads Avro or JSON Schema through a schema registry, but no lagsched_schema_registry "
                "Connection was given to the slot"
            )
        self._routes: dict[str, TopicRoute] = {}
        self._unrouted: set[str] = set()
        self._route_of: dict[str, TopicRoute] = {}
        self._typed: dict[str, IcebergSink] = {}
        self._exists: set[str] = set()
        self.dead_letters: IcebergSink | None = None
        self._decisions: schema_decisions.Decisions = {}
        if self._rules:
            dead = dead_letter_table(lake)
            self._ensure(dead, DEAD_LETTER_SCHEMA, DEAD_LETTERS)
            self.dead_letters = IcebergSink(
                spark, lake, properties=self._properties, identifier=dead, shape=DEAD_LETTERS, clock=clock
            )

    def learn(self, topics: Iterable[str], *, log_append_time: Iterable[str] = ()) -> None:
        """Apply the routes to topics not seen yet (the slot's held topics, at each plan);
        ``log_append_time``: those of them whose timestamps the broker sets (no allowed lateness).

        Raises:
            ConfigError: two topics would land in one table (`route_topics`).
        """
        topics = list(topics)
        appended = set(log_append_time)
        self._appended = (self._appended - set(topics)) | (appended & set(topics))
        new = [t for t in topics if t not in self._routes and t not in self._unrouted]
        if not new or not self._rules:
            self._unrouted.update(new)
            return
        routed = route_topics(
            self._rules, [*self._routes, *new], namespace=self._lake.namespace, shared_table=self._lake.table
        )
        tables = []
        for topic in new:
            route = routed[topic]
            if route is None:
                self._unrouted.add(topic)
                continue
            identifier = self.identifier_of(route)
            if self.dead_letters is not None and identifier.lower() == self.dead_letters.identifier.lower():
                raise ConfigError(
                    f"routes: topic {topic!r} -> {identifier}, the cluster's dead-letter table; give it another table",
                    field="routes",
                    value=topic,
                    allowed="a table of its own",
                )
            self._routes[topic], self._route_of[identifier] = route, route
            tables.append(identifier)
            log.info(
                "topic %s lands in %s (values %s, keys %s)", topic, identifier, route.value_format, route.key_format
            )
        self._decisions.update(schema_decisions.load_decisions(self._conn, tables))

    @property
    def has_routes(self) -> bool:
        """Whether the cluster routes any topic to a typed table (its slots then decode)."""
        return bool(self._rules)

    @property
    def lake(self) -> LakeTable:
        return self._lake

    def identifier_of(self, route: TopicRoute) -> str:
        return f"{self._lake.catalog}.{route.namespace}.{route.table}"

    def _tables(self) -> dict[str | None, IcebergSink]:
        """The tables a commit may go to that exist: None for the shared one."""
        out: dict[str | None, IcebergSink] = {None: self.shared}
        if self.dead_letters is not None:
            out[self.dead_letters.identifier] = self.dead_letters
        for identifier in sorted(self._route_of):
            sink = self._typed_sink(identifier)
            if sink is not None:
                out[identifier] = sink
        return out

    def _typed_sink(self, identifier: str) -> IcebergSink | None:
        sink = self._typed.get(identifier)
        if sink is None and (identifier in self._exists or self._table_exists(identifier)):
            sink = self._typed[identifier] = IcebergSink(
                self._spark, self._lake, properties=self._properties, identifier=identifier, shape=TYPED,
                clock=self._clock,
            )  # fmt: skip
        return sink

    def _table_exists(self, identifier: str) -> bool:
        exists = bool(self._catalog().tableExists(self._table_id(identifier)))
        if exists:
            self._exists.add(identifier)
        return exists

    # ------------------------------------------------------------------ the batch's calls

    def mark(self, topics: Iterable[str] | None = None) -> Marks:
        """The current snapshot of each table ``topics`` can land in (None: of every table): take it
        before ``begin_batch`` (docs/lake.md). A batch reads only the tables of its own topics: a
        cluster of hundreds of typed tables would otherwise refresh each of them every batch."""
        tables = self._tables()
        if topics is not None:
            wanted = {table for topic in topics for table in self._landing(topic)}
            tables = {name: sink for name, sink in tables.items() if name in wanted}
        return {(name or self.shared.identifier): sink.mark() for name, sink in tables.items()}

    def present(self, reads: Sequence[BatchRead], since: Marks | None) -> Presence:
        """Which tables hold records of the redone ``reads`` as of the mark ``since``."""
        if not since or not reads:
            return Presence()
        held: dict[str | None, frozenset[Key]] = {}
        for name, sink in self._tables().items():
            snapshot = since.get(name or self.shared.identifier)
            wanted = [r for r in reads if name in self._landing(r.topic)]
            held[name] = sink.present(wanted, snapshot) if wanted and snapshot is not None else frozenset()
        skip = frozenset(
            (r.topic, r.partition)
            for r in reads
            if all((r.topic, r.partition) in held.get(t, frozenset()) for t in self._landing(r.topic))
        )
        return Presence(skip, held)

    def _landing(self, topic: str) -> list[str | None]:
        """The tables a topic's records can land in."""
        route = self._routes.get(topic)
        if route is None:
            return [None]
        assert self.dead_letters is not None
        return [self.identifier_of(route), self.dead_letters.identifier]

    def file_settings(self) -> Any:
        """How the tasks write the shared table's files (`IcebergSink.file_settings`)."""
        return self.shared.file_settings()

    def routed(self) -> RoutedTables | None:
        """What the tasks need for the routed topics (None: there are none)."""
        if not self._routes or self.dead_letters is None:
            return None
        tables = {}
        for identifier in self._route_of:
            sink = self._typed.get(identifier)
            if sink is not None:
                location, properties = sink.place()
            else:
                location, properties = self._location(identifier), dict(TYPED_PROPERTIES)
            tables[identifier] = TableFiles(identifier, location, properties)
        location, properties = self.dead_letters.place()
        return RoutedTables(
            routes=self._routes,
            tables=tables,
            dead_letters=TableFiles(self.dead_letters.identifier, location, properties),
            registry=self._registry,
            decisions=dict(self._decisions),
            schemas={} if self._registry is None else registry_client(self._registry).known(),
            catalog=self._lake.catalog,
            s3_endpoint=self._lake.s3_endpoint,
        )

    def prepare(self, files: Sequence[WrittenFile]) -> bool:
        """Make each typed table ``files`` go to ready for them: created if missing, each new writer
        schema (of values, and of keys) decided and the table evolved. False if a schema was
        refused: the files are to be deleted and their ranges read again, their records going to
        the dead-letter table then."""
        wanted: dict[str, set[tuple[str, int]]] = {}
        for f in files:
            if f.table is not None and f.table in self._route_of:
                writers = wanted.setdefault(f.table, set())
                writers.add((VALUE, -1 if f.schema_id is None else f.schema_id))
                if f.key_schema_id is not None and f.key_schema_id >= 0:
                    writers.add((KEY, f.key_schema_id))
        fine = True
        for identifier, writers in sorted(wanted.items()):
            known = {(part, i) for (t, part, i) in self._decisions if t == identifier}
            if identifier in self._exists and not (writers - known - {(VALUE, -1)}):
                fine &= not any(self._decisions.get((identifier, *w)) for w in writers)
                continue
            with schema_decisions.table_lock(self._conn, identifier):
                self._decisions.update(schema_decisions.load_decisions(self._conn, [identifier]))
                # Values first, tombstones (-1) last: a table is created with a writer schema's
                # columns where it can be.
                for part, schema_id in sorted(writers, key=lambda w: (w[1] < 0, w[0] != VALUE, w[1])):
                    fine &= self._decide(identifier, part, schema_id)
        return fine

    def _decide(self, identifier: str, part: str, schema_id: int) -> bool:
        """Under the table's lock: whether rows of the writer schema ``schema_id`` of ``part`` may
        be committed to the table (values of -1: tombstones, which have the Kafka columns alone).
        Decided once (recorded); an accepted schema has evolved the table before its decision was
        recorded."""
        route = self._route_of[identifier]
        if schema_id < 0:
            self._ensure_typed(identifier, None, route)
            return True
        writer = writer_columns(route, part, decoder_for(route, self._registry, schema_id, part))
        created = self._ensure_typed(identifier, writer, route)
        decision = (identifier, part, schema_id)
        whose = "key writer schema" if part == KEY else "writer schema"
        known = decision in self._decisions
        if known and self._decisions[decision] is not None:
            return False
        refused: str | None = None
        if not created:
            try:
                self._evolve(identifier, writer, f"{whose} {schema_id}")
            except evolution.Incompatible as exc:
                if known:  # accepted once: the table was dropped and made again otherwise since
                    raise LagschedError(
                        f"{identifier}: {whose} {schema_id} was accepted for it, but the table cannot hold it "
                        f"now ({exc}); was the table re-created? Restore it, or delete the schema_decisions rows "
                        "of the table after moving its data away"
                    ) from exc
                refused = str(exc)
        if known:
            return True
        standing = schema_decisions.record_decision(
            self._conn, identifier, part, schema_id, refused=refused, slot_id=self._slot
        )
        self._decisions[decision] = standing
        if standing is not None:
            dead = self.dead_letters.identifier if self.dead_letters is not None else "the dead-letter table"
            log.error(
                "%s: %s %d is incompatible with the table (%s); its records go to %s",
                identifier, whose, schema_id, standing, dead,
            )  # fmt: skip
        else:
            log.info("%s: %s %d accepted", identifier, whose, schema_id)
        return standing is None

    def commit(
        self, written: Sequence[WrittenFile], ranges: Mapping[Key, tuple[int, int]], since: Marks | None
    ) -> TableCommit:
        """Commit ``written`` to their tables, one conditional commit each (see the module doc).

        Raises:
            SinkConflictError: another holder committed records of these ranges to a table since
                the mark; the other tables' commits stand (a redo commits only what each lacks).
            Anything else: as `IcebergSink.commit`; the tables committed before it stand.
        """
        started = self._clock.monotonic()
        by_table: dict[str | None, list[WrittenFile]] = {}
        for f in written:
            by_table.setdefault(f.table, []).append(f)
        marks = since or {}
        snapshot_id, files, records = None, 0, 0
        late: dict[Key, list[LateRecords]] = {}
        refused: dict[Key, tuple[int, int]] = {}
        first_refusal: SinkConflictError | None = None
        # Typed tables and dead letters first, the shared table last (any order is exactly once).
        for name in sorted(by_table, key=lambda t: (t is None, t or "")):
            group = by_table[name]
            sink = self.shared if name is None else self._sink_for(name)
            keys = {(f.topic, f.partition) for f in group}
            try:
                covered = {k: ranges[k] for k in sorted(keys)}
                times, lates = self._watermarks(sink.identifier, name, group, covered)
                landed = sink.commit(
                    group, covered, marks.get(sink.identifier), summary={**_summary(sink, group), **times}
                )
            except SinkConflictError as exc:
                refused.update(exc.ranges)
                first_refusal = first_refusal or exc
                continue
            for key, found in lates.items():
                late.setdefault(key, []).extend(found)
            files, records = files + landed.files, records + landed.records
            if name is None or snapshot_id is None:
                snapshot_id = landed.snapshot_id
            if sink is self.dead_letters:
                self._dead_letters_landed(group)
        if first_refusal is not None:
            raise SinkConflictError(str(first_refusal), refused)
        return TableCommit(
            snapshot_id, files, records, self._clock.monotonic() - started, {k: tuple(v) for k, v in late.items()}
        )

    def _watermarks(
        self, identifier: str, table: str | None, files: Sequence[WrittenFile], covered: Mapping[Key, tuple[int, int]]
    ) -> tuple[dict[str, str], dict[Key, list[LateRecords]]]:
        """The commit's summary of times (docs/completeness.md) and its late records.

        * ``lagsched.max-timestamps``: the largest timestamp per partition;
        * ``lagsched.valid-through-ts``: the table's watermark once this commit's offsets are
          stored, read from MySQL before the commit (a reader of the summary sees the table as of it);
        * late records: the records of files whose hour was complete under the watermark before
          the commit (``lagsched.late-records`` in the summary, and logged with the offsets).

        The dead-letter table has no watermark (it holds what could not be read, of any hour)."""
        latest = max_timestamps(files)
        out: dict[str, str] = {}
        if latest:
            nested: dict[str, dict[str, int]] = {}
            for (topic, partition), ms in sorted(latest.items()):
                nested.setdefault(topic, {})[str(partition)] = ms
            out[MAX_TIMESTAMPS_PROPERTY] = json.dumps(nested, separators=(",", ":"))
        if (
            self._cluster is None
            or self._conn is None
            or (self.dead_letters is not None and table == self.dead_letters.identifier)
        ):
            return out, {}
        topics = self.topics_of(table)
        after = {k: (end, latest.get(k)) for k, (_start, end) in covered.items()}
        before, mark = watermarks.watermark_around_commit(self._conn, self._cluster, topics, after)
        if mark is not None:
            out[VALID_THROUGH_PROPERTY] = str(mark)
        lateness_ms = self.lateness_of(table, topics) * 1000
        late: dict[Key, dict[int, int]] = {}
        for f in files:
            if hour_complete(f.hour * HOUR_MS, before, lateness_ms):
                hours = late.setdefault((f.topic, f.partition), {})
                hours[f.hour * HOUR_MS] = hours.get(f.hour * HOUR_MS, 0) + f.records
        if late:
            summary: dict[str, dict[str, int]] = {}
            for (topic, _partition), hours in sorted(late.items()):
                for hour, n in sorted(hours.items()):
                    per_topic = summary.setdefault(topic, {})
                    per_topic[hour_key(hour)] = per_topic.get(hour_key(hour), 0) + n
            out[LATE_RECORDS_PROPERTY] = json.dumps(summary, separators=(",", ":"))
            log.warning(
                "%s: %d late record(s), in hours complete before this commit (allowed lateness %d s): %s",
                identifier, sum(n for hours in late.values() for n in hours.values()), lateness_ms // 1000,
                ", ".join(f"{t} {h} {n}" for t, hs in sorted(summary.items()) for h, n in hs.items()),
            )  # fmt: skip
        return out, {
            key: [LateRecords(identifier, hour, n) for hour, n in sorted(hours.items())] for key, hours in late.items()
        }

    def lateness_of(self, table: str | None, topics: Iterable[str]) -> int:
        """The allowed lateness (s) of ``table`` (None: the shared table), whose ``topics`` land in
        it (`topics_of`): `table_lateness` of its route's, the cluster's, and whether its topics
        are all ``LogAppendTime``."""
        route = None if table is None else self._route_of.get(table)
        route_s = None if route is None else route.allowed_lateness_s
        return table_lateness(route_s, self._lateness_s, (t in self._appended for t in topics))

    def topics_of(self, table: str | None) -> list[str]:
        """The registered topics of the cluster whose records land in ``table`` (None: the shared
        table), by the routes."""
        if table is not None:
            return [topic for topic, route in self._routes.items() if self.identifier_of(route) == table]
        rows = load_topics(self._conn, self._cluster) if self._cluster is not None else []
        names = tuple(t.name for t in rows)
        self._appended = (self._appended - set(names)) | {t.name for t in rows if t.log_append_time}
        if names != self._shared_topics[0]:
            routed = route_topics(self._rules, names, namespace=self._lake.namespace, shared_table=self._lake.table)
            self._shared_topics = (names, [n for n in names if routed[n] is None])
        return self._shared_topics[1]

    def _dead_letters_landed(self, files: Sequence[WrittenFile]) -> None:
        per_topic: dict[str, int] = {}
        for f in files:
            per_topic[f.topic] = per_topic.get(f.topic, 0) + f.records
        log.warning(
            "%d record(s) could not be decoded and landed in %s: %s",
            sum(per_topic.values()), self.dead_letters.identifier if self.dead_letters else "?",
            ", ".join(f"{t} {n}" for t, n in sorted(per_topic.items())),
        )  # fmt: skip
        if self._count_dead is not None:
            self._count_dead(per_topic)

    def _sink_for(self, identifier: str) -> IcebergSink:
        if self.dead_letters is not None and identifier == self.dead_letters.identifier:
            return self.dead_letters
        sink = self._typed_sink(identifier)
        if sink is None:
            raise LagschedError(f"{identifier}: files were written for it, but the table was never created")
        return sink

    def delete(self, locations: Iterable[str]) -> None:
        """Delete data files that will never be committed, whichever table they were for."""
        self.shared.delete(locations)

    # ------------------------------------------------------------------ tables

    def _catalog(self) -> Any:
        manager = self._spark._jsparkSession.sessionState().catalogManager()
        return manager.catalog(self._lake.catalog).icebergCatalog()

    def _table_id(self, identifier: str) -> Any:
        return self._spark._jvm.org.apache.iceberg.catalog.TableIdentifier.parse(identifier.split(".", 1)[1])

    def _location(self, identifier: str) -> str:
        """Where a table lagsched creates lives: ``<warehouse>/<namespace>/<table>``, known before it
        exists, so that a batch's tasks can write its first files."""
        _catalog, namespace, table = identifier.split(".")
        return f"{self._lake.warehouse.rstrip('/')}/{namespace}/{table}"

    def _ensure_typed(self, identifier: str, writer: Any, route: TopicRoute) -> bool:
        """Create the typed table with ``writer``'s columns (None: the Kafka columns alone) if it
        does not exist; whether it was created now."""
        if identifier in self._exists or self._table_exists(identifier):
            return False
        schema = writer if writer is not None else typed_schema(_empty(), FIXED_KEY_TYPES.get(route.key_format))
        created = self._ensure(identifier, schema, TYPED)
        self._typed_sink(identifier)
        return created

    def _ensure(self, identifier: str, schema: Any, shape: TableShape) -> bool:
        """Create ``identifier`` with the Arrow ``schema`` and ``shape``'s partitions, with its name
        mapping, unless it exists; whether this call created it."""
        jvm = self._spark._jvm
        catalog, table_id = self._catalog(), self._table_id(identifier)
        if catalog.tableExists(table_id):
            self._exists.add(identifier)
            return False
        namespace = identifier.rsplit(".", 1)[0]
        self._spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {namespace}")
        iceberg = jvm.org.apache.iceberg.SchemaParser.fromJson(json.dumps(iceberg_schema(schema)))
        spec = jvm.org.apache.iceberg.PartitionSpec.builderFor(iceberg)
        for column, transform in shape.spec:
            spec = spec.identity(column) if transform == "identity" else spec.hour(column)
        properties = jvm.java.util.HashMap()
        for key, value in (TYPED_PROPERTIES if shape is TYPED else TABLE_PROPERTIES).items():
            properties.put(key, value)
        if CLUSTER_PROPERTY in self._properties:
            properties.put(CLUSTER_PROPERTY, self._properties[CLUSTER_PROPERTY])
        try:
            table = catalog.createTable(table_id, iceberg, spec.build(), self._location(identifier), properties)
        except Exception as exc:
            if not catalog.tableExists(table_id):
                raise
            log.info("%s was created by another slot meanwhile (%s)", identifier, str(exc).splitlines()[0])
            self._exists.add(identifier)
            return False
        self._set_mapping(table)
        self._exists.add(identifier)
        log.info("created %s (%d columns) at %s", identifier, len(schema), self._location(identifier))
        return True

    def _set_mapping(self, table: Any) -> None:
        """Keep the table's name mapping in step with its schema (every name a field had stays)."""
        schema = json.loads(str(self._spark._jvm.org.apache.iceberg.SchemaParser.toJson(table.schema())))
        previous = table.properties().get(NAME_MAPPING)
        mapping = name_mapping(schema, None if previous is None else str(previous))
        if mapping != (None if previous is None else str(previous)):
            table.updateProperties().set(NAME_MAPPING, mapping).commit()

    def _evolve(self, identifier: str, writer: Any, whose: str) -> None:
        """Evolve the table to hold ``writer``'s rows (`lagsched.core.evolution`), or raise Incompatible."""
        sink = self._sink_for(identifier)
        table = sink.loaded()
        jvm = self._spark._jvm
        current = arrow_schema(json.loads(str(jvm.org.apache.iceberg.SchemaParser.toJson(table.schema()))))
        changes = evolution.plan(current, writer)
        if changes:
            update = table.updateSchema()
            for change in changes:
                _apply(update, change, jvm)
            update.commit()
            table.refresh()
            log.info("%s evolved for %s: %s", identifier, whose, ", ".join(_describe(c) for c in changes))
        self._set_mapping(table)


def _summary(sink: IcebergSink, files: Sequence[WrittenFile]) -> dict[str, str]:
    """A typed table's commit records its rows per writer schema id (lineage: which schema wrote what)."""
    if sink.shape is not TYPED:
        return {}
    per_schema: dict[str, int] = {}
    per_key_schema: dict[str, int] = {}
    for f in files:
        key = str(-1 if f.schema_id is None else f.schema_id)
        per_schema[key] = per_schema.get(key, 0) + f.records
        if f.key_schema_id is not None and f.key_schema_id >= 0:
            key = str(f.key_schema_id)
            per_key_schema[key] = per_key_schema.get(key, 0) + f.records
    out = {SCHEMA_IDS_PROPERTY: json.dumps(dict(sorted(per_schema.items())), separators=(",", ":"))}
    if per_key_schema:
        out[KEY_SCHEMA_IDS_PROPERTY] = json.dumps(dict(sorted(per_key_schema.items())), separators=(",", ":"))
    return out


def _empty() -> Any:
    import pyarrow as pa

    return pa.schema([])


def _java_type(kind: Any, jvm: Any) -> Any:
    import pyarrow as pa

    wrapped = iceberg_schema(pa.schema([pa.field("x", kind)]))
    return jvm.org.apache.iceberg.SchemaParser.fromJson(json.dumps(wrapped)).findField("x").type()


def _apply(update: Any, change: evolution.Change, jvm: Any) -> None:
    path = ".".join(change.path)
    if isinstance(change, evolution.AddColumn):
        parent, name = change.path[:-1], change.path[-1]
        kind = _java_type(change.type, jvm)
        if parent:
            update.addColumn(".".join(parent), name, kind)
        else:
            update.addColumn(name, kind)
    elif isinstance(change, evolution.RenameColumn):
        update.renameColumn(path, change.to)
    elif isinstance(change, evolution.MakeOptional):
        update.makeColumnOptional(path)
    elif isinstance(change, evolution.WidenColumn):
        update.updateColumn(path, _java_type(change.to, jvm))


def _describe(change: evolution.Change) -> str:
    path = ".".join(change.path)
    if isinstance(change, evolution.AddColumn):
        return f"added {path} ({change.type})"
    if isinstance(change, evolution.RenameColumn):
        return f"renamed {path} to {change.to}"
    if isinstance(change, evolution.MakeOptional):
        return f"made {path} optional"
    return f"widened {path} to {change.to}"
