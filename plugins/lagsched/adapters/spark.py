"""Spark sessions with the Kafka connector from local jars, and exact offset-range reads."""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from lagsched.adapters.class_archive import archive_options
from lagsched.core.offsets import OffsetRange, spark_kafka_options

#: Options of Spark's Kafka source beyond its defaults (docs/consumer-benchmark.md has the figures).
#: Spark's consumer asks the broker for the partition's earliest and latest offsets (seeks and two
#: ListOffsets round trips) after every poll, and a poll returns at most ``max.poll.records``
#: (Kafka's default: 500): bigger polls make that per-poll cost rare; bigger fetches keep a poll
#: full without more round trips.
READ_OPTIONS: Mapping[str, str] = {}
#: A JSON object of Kafka source options layered over `READ_OPTIONS` (``kafka.*`` ones go to the
#: consumers), for a deployment that measures better ones; the Kafka Connection's entries win over both.
READ_OPTIONS_ENV = "LAGSCHED_SPARK_READ_OPTIONS"
#: The reads' isolation level, over anything configured: Kafka's Java consumer (Spark's) reads
#: uncommitted by default, which lands records of aborted transactions, records that never happened.
ISOLATION_LEVEL = "read_committed"

log = logging.getLogger(__name__)


class SparkSetupError(RuntimeError):
    """The Kafka connector jars are missing; run `make deps`."""


def connector_jars() -> list[str]:
    """The connector jars from ``LAGSCHED_SPARK_JARS`` (set by the stack), checked to exist."""
    raw = os.environ.get("LAGSCHED_SPARK_JARS", "")
    jars = [j for j in raw.split(",") if j]
    missing = [j for j in jars if not os.path.exists(j)]
    if not jars or missing:
        raise SparkSetupError(
            "Spark's Kafka connector jars are not available "
            f"(LAGSCHED_SPARK_JARS={raw!r}, missing: {missing}); run `make deps`"
        )
    return jars


def session(app_name: str, *, master: str | None = "local[2]", conf: Mapping[str, str] | None = None) -> SparkSession:
    """A Spark session that can read Kafka without resolving any package at start.

    ``master=None`` leaves the master to ``spark-submit --master`` (a job must not override it).
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app_name)
    if master is not None:
        builder = builder.master(master)
    builder = (
        builder.config("spark.jars", ",".join(connector_jars()))
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.ui.enabled", "false")
        # Timestamps are read and hour partitions computed in UTC, whatever the hosts' zones.
        .config("spark.sql.session.timeZone", "UTC")
        # Parquet timestamps as plain INT64 micros (INT96 is deprecated; every reader knows micros).
        .config("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")
    )
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


def with_client_rack(kafka_config: Mapping[str, Any], rack: str | None) -> dict[str, Any]:
    """``kafka_config`` plus ``client.rack`` (when ``rack`` is given) for the reader's consumers.

    ``read_offset_ranges`` passes it on as ``kafka.client.rack``: brokers running the
    ``RackAwareReplicaSelector`` then serve the reads from the replica in that rack (fetch from
    follower, KIP-392) instead of the leader, wherever it is (docs/rack.md).

    >>> with_client_rack({"bootstrap.servers": "b:9092"}, "a")
    {'bootstrap.servers': 'b:9092', 'client.rack': 'a'}
    """
    config = dict(kafka_config)
    if rack is not None:
        config["client.rack"] = rack
    return config


#: librdkafka's security settings that Kafka's Java client (the one inside Spark's Kafka source)
#: spells differently: `java_kafka_config` translates them; the Java client would ignore them.
_LIBRDKAFKA_SECURITY = frozenset(
    {
        "sasl.mechanisms",
        "sasl.username",
        "sasl.password",
        "ssl.ca.location",
        "ssl.certificate.location",
        "ssl.key.location",
        "enable.ssl.certificate.verification",
    }
)
_JAAS_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}


class KafkaConfigError(ValueError):
    """A Kafka Connection setting Spark's (Java) Kafka client cannot be given; the message says why."""


def java_kafka_config(config: Mapping[str, Any]) -> dict[str, str]:
    """The Kafka Connection's librdkafka settings in the Java client's words, for Spark's source.

    The same Connection drives confluent-kafka (the DAGs, the slot's Admin calls and offset
    mirroring) and Spark's Java consumers, whose names differ for security: librdkafka's
    ``sasl.username``/``sasl.password`` become a ``sasl.jaas.config`` for the mechanism
    (PLAIN, SCRAM-SHA-256/512), ``sasl.mechanisms`` is ``sasl.mechanism``, and ``ssl.ca.location``
    (a PEM file) is a PEM truststore. Every other key passes as written, as before (Java-only
    ones such as ``sasl.jaas.config`` or ``ssl.truststore.*`` included; a librdkafka-only tuning
    key is ignored by the Java client with a warning). The password goes only into ``sasl.jaas.config``,
    which Spark redacts from its logs and UI (its value matches ``spark.redaction.regex``).

    >>> java_kafka_config({"bootstrap.servers": "b:9093", "security.protocol": "SASL_SSL",
    ...     "sasl.mechanisms": "PLAIN", "sasl.username": "u", "sasl.password": "p"})
    ... # doctest: +NORMALIZE_WHITESPACE
    {'bootstrap.servers': 'b:9093', 'security.protocol': 'SASL_SSL', 'sasl.mechanism': 'PLAIN',
     'sasl.jaas.config': 'org.apache.kafka.common.security.plain.PlainLoginModule required username="u" password="p";'}

    Raises:
        KafkaConfigError: a SASL mechanism with a username that has no JAAS module here (say
            OAUTHBEARER or GSSAPI: give ``sasl.jaas.config`` itself), or a PEM client certificate
            (``ssl.certificate.location``), which the Java client takes only as a keystore.
    """
    out = {key: str(value) for key, value in config.items() if key not in _LIBRDKAFKA_SECURITY}
    mechanism = config.get("sasl.mechanism") or config.get("sasl.mechanisms")
    if mechanism:
        out["sasl.mechanism"] = str(mechanism).strip().upper()
    if "sasl.username" in config and "sasl.jaas.config" not in config:
        module = _JAAS_MODULES.get(out.get("sasl.mechanism", "PLAIN"))
        if module is None:
            raise KafkaConfigError(
                f"sasl.mechanism {out['sasl.mechanism']} has no login module lagsched can fill in for Spark's "
                "Kafka client: set sasl.jaas.config in the Kafka Connection's extra"
            )

        def quoted(v: Any) -> str:
            return '"' + str(v).replace("\\", "\\\\").replace('"', '\\"') + '"'

        out["sasl.jaas.config"] = (
            f"{module} required username={quoted(config['sasl.username'])} "
            f"password={quoted(config.get('sasl.password', ''))};"
        )
    if "ssl.ca.location" in config and "ssl.truststore.location" not in config:
        out["ssl.truststore.type"] = "PEM"
        out["ssl.truststore.location"] = str(config["ssl.ca.location"])
    if "ssl.certificate.location" in config and "ssl.keystore.location" not in config:
        raise KafkaConfigError(
            "ssl.certificate.location (a PEM client certificate) cannot be given to Spark's Kafka client: "
            "add ssl.keystore.location (a PKCS12 or PEM keystore with the key and certificate) and "
            "ssl.keystore.type to the Kafka Connection's extra"
        )
    return out


def read_options(env: Mapping[str, str]) -> dict[str, str]:
    """`READ_OPTIONS` with the environment's `READ_OPTIONS_ENV` over them.

    >>> read_options({READ_OPTIONS_ENV: '{"kafka.max.poll.records": 1000}'})["kafka.max.poll.records"]
    '1000'
    """
    raw = env.get(READ_OPTIONS_ENV, "").strip()
    extra = json.loads(raw) if raw else {}
    if not isinstance(extra, dict):
        raise ValueError(f"{READ_OPTIONS_ENV} must be a JSON object of Kafka source options, got {raw!r}")
    return {**READ_OPTIONS, **{str(k): str(v) for k, v in extra.items()}}


def read_offset_ranges(
    spark: SparkSession,
    kafka_config: Mapping[str, Any],
    ranges: Iterable[OffsetRange],
    *,
    include_headers: bool = False,
) -> DataFrame:
    """Exactly the committed records of ``ranges`` through Spark's Kafka batch source.

    ``failOnDataLoss`` stays true: if retention deleted part of a range, the read fails rather
    than silently skipping records. Every ``kafka_config`` entry goes to the consumers as
    ``kafka.<key>``, so a ``client.rack`` (``with_client_rack``) makes them fetch from a
    same-rack replica.

    The consumers read committed (`ISOLATION_LEVEL`, whatever the Connection or
    ``LAGSCHED_SPARK_READ_OPTIONS`` say): records of aborted transactions are skipped, and so are
    transaction markers. Spark's consumer steps over such offsets without records (it seeks on to
    the position after each poll, as for compacted topics), also when they end a range. A range
    must not end past the partition's last stable offset, though: a read-committed poll there gets
    nothing, and Spark takes that for data loss and fails the read. The planner ends every range at
    the LSO (``adapters.kafka_admin.read_offsets``).
    """
    reader = spark.read.format("kafka").option("includeHeaders", str(include_headers).lower())
    tuned = read_options(os.environ)
    for key, value in tuned.items():
        reader = reader.option(key, value)
    for key, value in java_kafka_config(kafka_config).items():
        reader = reader.option(f"kafka.{key}", value)
    configured = {str(v) for k, v in kafka_config.items() if k == "isolation.level"}
    configured |= {v for k, v in tuned.items() if k == "kafka.isolation.level"}
    if configured - {ISOLATION_LEVEL}:
        log.warning("ignoring isolation.level=%s: lagsched reads %s only", sorted(configured), ISOLATION_LEVEL)
    reader = reader.option("kafka.isolation.level", ISOLATION_LEVEL)
    for key, value in spark_kafka_options(ranges).items():
        reader = reader.option(key, value)
    return reader.option("failOnDataLoss", "true").load()


def submit_command(
    application: str,
    args: Sequence[str],
    *,
    master: str = "local[2]",
    java_options: Sequence[str] = (),
    class_archive: str | None = None,
    record_classes: bool = False,
) -> list[str]:
    """The ``spark-submit`` argv for a lagsched job, with the connector jars and the venv's python.

    ``java_options`` go to the driver's JVM (in local mode the executors run in it too), e.g. the
    C1-only compiler that halves a short job's start-up CPU.

    ``class_archive`` names a JVM class-data archive (CDS, JDK 13+) of the job's classes: the JVM
    maps the classes from it instead of loading and verifying them one by one, which took a
    quarter off a test slot's start-up CPU (docs/consumer.md, "Start-up from a class-data archive"). With
    ``record_classes`` the JVM writes it there as it exits normally; give each recording JVM a
    path of its own and move the file into place afterwards, as a JVM may map it meanwhile.
    Without ``record_classes`` a missing archive is skipped, and one that does not match (another
    JDK, other jars) is ignored by the JVM itself. Either way the connector jars go on the driver's
    class path too, where an archive can hold their classes, the same for recording and mapping.
    """
    bin_dir = os.path.dirname(sys.executable)
    log4j = os.path.join(os.path.dirname(os.path.abspath(application)), "log4j2.properties")
    jars = connector_jars()
    jvm = [f"-Dlog4j2.configurationFile=file:{log4j}", *java_options]
    class_path: list[str] = []
    if class_archive is not None and (record_classes or os.path.isfile(class_archive)):
        jvm.extend(archive_options(class_archive, record=record_classes))
        class_path = ["--driver-class-path", os.pathsep.join(jars)]
    return [
        os.path.join(bin_dir, "spark-submit"),
        "--master",
        master,
        "--driver-java-options",
        " ".join(jvm),
        *class_path,
        "--jars",
        ",".join(jars),
        "--conf",
        f"spark.pyspark.python={sys.executable}",
        application,
        *args,
    ]
