"""Replay dead letters into their typed table once the schema is fixed, exactly once (the
``lagsched_replay`` DAG; docs/routing.md, "Replaying dead letters").

A dead letter keeps the record's raw key, value and headers and its coordinates, so it can be
decoded again: after the route's declared schema was fixed, the registry's Connection pointed at
the right registry, or a refused schema's table was made to hold it. A replay:

1. reads the topic's dead letters in the asked window (offsets, partitions, a time window) that
   ``dead_letter_replays`` does not list yet;
2. decodes them as a slot would (`lagsched.core.typed_rows.split_batch`, the route as the
   cluster's ``lagsched_clusters`` entry has it now, the recorded schema decisions; a writer
   schema never decided is decided and the table evolved now, under the table's lock);
3. looks for their offsets in the typed table: rows found there landed in a replay that was
   killed before step 5, and are only recorded;
4. appends the others in one commit (pyiceberg, optimistic: a commit that lost a race with another
   writer is tried again from step 3, so two replays of the same dead letters land them once);
5. records them in ``dead_letter_replays``.

What still does not decode stays a dead letter, its reason reported. The dead-letter table is
never changed: a replayed dead letter stays there, listed as replayed.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from lagsched.adapters import replays, schema_decisions
from lagsched.core.errors import ConfigError, LagschedError
from lagsched.core.routing import TopicRoute

__all__ = ["ReplayReport", "ReplayRequest", "replay_dead_letters"]

log = logging.getLogger(__name__)

#: Commits lost to a concurrent writer before the replay gives up (each is tried again from the check).
COMMIT_TRIES = 5
_RAW_COLUMNS = ("topic", "partition", "offset", "timestamp", "key", "value", "headers")


@dataclass(frozen=True, slots=True)
class ReplayRequest:
    """Which dead letters to replay: one topic's, optionally some partitions, an offset range
    ``[from_offset, to_offset)`` and a window of record timestamps ``[from_time, to_time)``."""

    cluster: str
    topic: str
    partitions: tuple[int, ...] = ()
    from_offset: int | None = None
    to_offset: int | None = None
    from_time: datetime | None = None
    to_time: datetime | None = None
    dry_run: bool = False

    @classmethod
    def of(cls, params: Mapping[str, Any]) -> ReplayRequest:
        """From the DAG's form, each value checked (a run triggered through the API skips the form).

        >>> ReplayRequest.of({"cluster": "eu", "topic": "orders", "partitions": [0, 2], "from_offset": 5}).partitions
        (0, 2)
        >>> ReplayRequest.of({"cluster": "eu", "topic": "orders", "from_offset": 9, "to_offset": 3})
        Traceback (most recent call last):
        lagsched.core.errors.ConfigError: lagsched_replay: from_offset 9 is not below to_offset 3
        """
        from lagsched.core.names import validate_cluster_name, validate_topic_name

        def number(key: str) -> int | None:
            value = params.get(key)
            if value in (None, ""):
                return None
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ConfigError(f"lagsched_replay: {key} = {value!r}: a whole number >= 0", field=key, value=value)
            return value

        def moment(key: str) -> datetime | None:
            value = params.get(key)
            if value in (None, ""):
                return None
            try:
                at = datetime.fromisoformat(str(value))
            except ValueError:
                raise ConfigError(
                    f"lagsched_replay: {key} = {value!r}: an ISO time, e.g. 2026-12-01T10:00:00Z",
                    field=key,
                    value=value,
                ) from None
            if at.tzinfo is None:
                raise ConfigError(
                    f"lagsched_replay: {key} = {value!r}: give its zone (Z for UTC)", field=key, value=value
                )
            return at

        raw_parts = params.get("partitions") or []
        if not isinstance(raw_parts, list) or any(
            isinstance(p, bool) or not isinstance(p, int) or p < 0 for p in raw_parts
        ):
            raise ConfigError(
                f"lagsched_replay: partitions = {raw_parts!r}: a list of partition numbers", field="partitions"
            )
        request = cls(
            cluster=validate_cluster_name(str(params.get("cluster") or "lagsched_kafka")),
            topic=validate_topic_name(str(params.get("topic") or "")),
            partitions=tuple(sorted(set(raw_parts))),
            from_offset=number("from_offset"),
            to_offset=number("to_offset"),
            from_time=moment("from_time"),
            to_time=moment("to_time"),
            dry_run=bool(params.get("dry_run", False)),
        )
        if (
            request.from_offset is not None
            and request.to_offset is not None
            and request.from_offset >= request.to_offset
        ):
            raise ConfigError(
                f"lagsched_replay: from_offset {request.from_offset} is not below to_offset {request.to_offset}",
                field="from_offset",
            )
        if request.from_time is not None and request.to_time is not None and request.from_time >= request.to_time:
            raise ConfigError("lagsched_replay: from_time is not before to_time", field="from_time")
        return request

    def row_filter(self) -> str:
        """The dead letters asked for, as a pyiceberg filter on the dead-letter table (a checked
        topic name and numbers only, so nothing needs escaping).

        >>> ReplayRequest("eu", "orders", (0, 2), 5, 9).row_filter()
        "topic == 'orders' AND partition IN (0, 2) AND offset >= 5 AND offset < 9"
        """
        terms = [f"topic == '{self.topic}'"]
        if self.partitions:
            terms.append(f"partition IN ({', '.join(str(p) for p in self.partitions)})")
        if self.from_offset is not None:
            terms.append(f"offset >= {self.from_offset}")
        if self.to_offset is not None:
            terms.append(f"offset < {self.to_offset}")
        if self.from_time is not None:
            terms.append(f"timestamp >= '{self.from_time.isoformat()}'")
        if self.to_time is not None:
            terms.append(f"timestamp < '{self.to_time.isoformat()}'")
        return " AND ".join(terms)


@dataclass
class ReplayReport:
    """What a replay found and did (the task's return value, shown in the Airflow UI)."""

    topic: str
    target_table: str
    dead_letters: int = 0
    replayed_before: int = 0
    landed: int = 0
    found_in_table: int = 0
    still_dead: int = 0
    reasons: dict[str, int] = field(default_factory=dict)
    snapshot_id: int | None = None
    dry_run: bool = False
    replay_id: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def replay_dead_letters(
    request: ReplayRequest,
    *,
    lake: Any,
    mysql: Any,
    conn: Any,
    route: TopicRoute | None,
    registry: Any = None,
    commit_hook: Any = None,
) -> ReplayReport:
    """Replay the dead letters ``request`` names (the module doc's steps); the report.

    ``route``: the topic's route now (None: the topic is not routed, which is refused);
    ``registry``: the schema registry's Connection when the route reads through it.
    ``commit_hook``: called with the report right after the typed table's commit, before the
    dead letters are recorded (the tests' stand-in for a replay killed there).

    Raises:
        ConfigError: the topic is not routed to a typed table.
        LagschedError: the typed table does not exist, or kept losing its commit to other writers.
    """
    from lagsched.adapters.lake_reader import open_catalog
    from lagsched.adapters.lake_sink import dead_letter_table

    if route is None:
        raise ConfigError(
            f"lagsched_replay: topic {request.topic} of cluster {request.cluster} has no route to a typed table "
            "(lagsched_clusters' routes): its dead letters have nowhere to go",
            field="topic",
            value=request.topic,
        )
    catalog = open_catalog(lake, mysql)
    dead_name = dead_letter_table(lake)
    target = f"{lake.catalog}.{route.namespace}.{route.table}"
    report = ReplayReport(request.topic, target, dry_run=request.dry_run, replay_id=str(uuid.uuid4()))
    dead = catalog.load_table(dead_name.split(".", 1)[1]).scan(row_filter=request.row_filter()).to_arrow()
    report.dead_letters = dead.num_rows
    done = replays.replayed(conn, dead_name, request.topic)
    if done and dead.num_rows:
        keys = list(zip(dead.column("partition").to_pylist(), dead.column("offset").to_pylist(), strict=True))
        dead = dead.filter(pa.array([k not in done for k in keys]))
    report.replayed_before = report.dead_letters - dead.num_rows
    if dead.num_rows == 0:
        return report
    typed = _typed_table(catalog, target)
    split = _decode(dead, route, registry=registry, conn=conn, target=target, typed=typed)
    if split.dead is not None:
        report.still_dead = split.dead.num_rows
        for reason in split.dead.column("reason").to_pylist():
            report.reasons[reason] = report.reasons.get(reason, 0) + 1
    rows = [t for t in split.typed]
    if not rows or request.dry_run:
        report.landed = sum(t.batch.num_rows for t in rows)
        return report
    with schema_decisions.table_lock(conn, target):
        for tries in range(1, COMMIT_TRIES + 1):
            typed.refresh()
            batch = pa.concat_tables([_as_table(t.batch, typed) for t in rows])
            there = _in_table(typed, request.topic, batch)
            landing = batch.filter(pa.array([k not in there for k in _keys(batch)]))
            report.found_in_table = batch.num_rows - landing.num_rows
            if landing.num_rows == 0:
                break
            try:
                typed.append(landing, snapshot_properties={"lagsched.replay": report.replay_id})
            except Exception as exc:
                if "CommitFailed" not in type(exc).__name__ or tries == COMMIT_TRIES:
                    raise
                log.warning("replay %s: the commit lost a race (%s); checking again", report.replay_id, exc)
                continue
            report.landed = landing.num_rows
            snapshot = typed.refresh().current_snapshot()
            report.snapshot_id = None if snapshot is None else snapshot.snapshot_id
            break
        if commit_hook is not None:
            commit_hook(report)
        replays.record_replayed(
            conn, dead_name, request.topic, target=target, rows=[k for t in rows for k in _keys(t.batch)],
            replay_id=report.replay_id,
        )  # fmt: skip
    log.info(
        "replay %s of %s: %d dead letter(s) asked for, %d replayed before, %d landed in %s, %d found there "
        "already, %d still dead",
        report.replay_id, request.topic, report.dead_letters, report.replayed_before, report.landed, target,
        report.found_in_table, report.still_dead,
    )  # fmt: skip
    return report


def _typed_table(catalog: Any, target: str) -> Any:
    from pyiceberg.exceptions import NoSuchTableError

    try:
        return catalog.load_table(target.split(".", 1)[1])
    except NoSuchTableError:
        raise LagschedError(
            f"{target} does not exist: a slot creates it on the topic's first record that decodes; replay once it has"
        ) from None


def _decode(dead: pa.Table, route: TopicRoute, *, registry: Any, conn: Any, target: str, typed: Any) -> Any:
    """The dead letters split as a slot would split them now, each writer schema decided (and the
    table evolved) under the table's lock where it was not yet."""
    from lagsched.adapters.typed_files import RAW_SCHEMA, decoder_for
    from lagsched.core.evolution import Incompatible
    from lagsched.core.typed_rows import split_batch

    # pyiceberg reads strings and bytes as Arrow's large types: the slots' raw columns, as a task builds them.
    raw = pa.RecordBatch.from_arrays(
        [dead.column(c).combine_chunks().cast(RAW_SCHEMA.field(c).type) for c in _RAW_COLUMNS],
        schema=pa.schema([RAW_SCHEMA.field(c).remove_metadata().with_nullable(True) for c in _RAW_COLUMNS]),
    )
    decisions = schema_decisions.load_decisions(conn, [target])

    def decoder(part: str, schema_id: int) -> Any:
        refused = decisions.get((target, part, schema_id))
        if refused is not None:
            raise Incompatible(refused, path="")
        return decoder_for(route, registry, schema_id, part)

    split = split_batch(raw, route, decoder, target=target)
    fresh = [w for w in split.writers if (target, *w) not in decisions]
    if not fresh:
        return split
    with schema_decisions.table_lock(conn, target):
        decisions.update(schema_decisions.load_decisions(conn, [target]))
        for part, schema_id in sorted(fresh):
            if (target, part, schema_id) in decisions:
                continue  # a slot decided it meanwhile
            refused = _evolve(typed, split.writers[(part, schema_id)])
            decisions[(target, part, schema_id)] = schema_decisions.record_decision(
                conn, target, part, schema_id, refused=refused, slot_id="lagsched_replay"
            )
    return split_batch(raw, route, decoder, target=target)


def _evolve(typed: Any, wanted: pa.Schema) -> str | None:
    """Evolve the typed table (pyiceberg) to hold the ``wanted`` columns; the reason it cannot, or None."""
    from lagsched.adapters.sink import NAME_MAPPING
    from lagsched.core import evolution
    from lagsched.core.iceberg_types import arrow_schema, name_mapping

    current = arrow_schema(json.loads(typed.schema().model_dump_json()))
    try:
        changes = evolution.plan(current, wanted)
    except evolution.Incompatible as exc:
        return str(exc)
    if changes:
        with typed.update_schema() as update:
            update.union_by_name(evolution.apply(current, changes))
    typed.refresh()
    previous = typed.properties.get(NAME_MAPPING)
    mapping = name_mapping(json.loads(typed.schema().model_dump_json()), previous)
    if mapping != previous:
        with typed.transaction() as txn:
            txn.set_properties({NAME_MAPPING: mapping})
    return None


def _as_table(batch: pa.RecordBatch, typed: Any) -> pa.Table:
    """Typed rows in the table's columns, by name: a column the writer lacked is null, a narrower
    type is widened (as Iceberg reads old files)."""
    schema = typed.schema().as_arrow()
    columns = []
    for f in schema:
        if f.name in batch.schema.names:
            columns.append(batch.column(f.name).cast(f.type))
        else:
            columns.append(pa.nulls(batch.num_rows, f.type))
    return pa.Table.from_arrays(columns, schema=schema)


def _keys(batch: Any) -> list[tuple[int, int]]:
    return list(
        zip(batch.column("_kafka_partition").to_pylist(), batch.column("_kafka_offset").to_pylist(), strict=True)
    )


def _in_table(typed: Any, topic: str, batch: pa.Table) -> set[tuple[int, int]]:
    """Which of the batch's (partition, offset) the typed table holds already."""
    found: set[tuple[int, int]] = set()
    offsets = sorted(pc.unique(batch.column("_kafka_offset")).to_pylist())
    for i in range(0, len(offsets), 1000):
        chunk = ", ".join(str(int(o)) for o in offsets[i : i + 1000])
        rows = typed.scan(
            row_filter=f"_kafka_topic == '{topic}' AND _kafka_offset IN ({chunk})",
            selected_fields=("_kafka_partition", "_kafka_offset"),
        ).to_arrow()
        found |= set(_keys(rows))
    return found


def routes_of(clusters: Sequence[Any], cluster: str, topic: str) -> TopicRoute | None:
    """The topic's route in the cluster's ``lagsched_clusters`` entry now."""
    found = [c for c in clusters if c.name == cluster]
    if not found:
        raise ConfigError(
            f"lagsched_replay: no cluster {cluster!r} in lagsched_clusters", field="cluster", value=cluster
        )
    route: TopicRoute | None = found[0].routes_for([topic])[topic]
    return route
