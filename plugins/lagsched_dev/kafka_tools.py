"""Kafka's own command-line tools, run from the jars `make deps` fetched (``java -cp <jars>/*``).

lagsched's numbers are checked against Kafka's own: ``kafka-consumer-groups --describe`` prints the
lag of the consumer group lagsched mirrors its offsets into, and ``kafka-consumer-perf-test`` is the
ceiling of reading on this machine. Both are Java classes in ``org.apache.kafka:kafka-tools`` of the
broker's version, on the broker's classpath (``deps/kafka/pom.xml``), so no Kafka distribution is
installed. The jars folder is ``LAGSCHED_KAFKA_JARS`` (set by ``lagsched-dev stack env``; point it at a
distribution's ``libs/`` to use that), else the stack's ``.local/jars/kafka``.

Example:
    >>> rows = consumer_groups_describe("127.0.0.1:19092", "lagsched.default")  # doctest: +SKIP
    >>> [(r.topic, r.partition, r.current_offset, r.lag) for r in rows]  # doctest: +SKIP
    [('orders', 0, 1200, 34), ('orders', 1, None, None)]
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "TOOLS",
    "GroupNotFoundError",
    "GroupOffsetRow",
    "KafkaToolError",
    "PerfResult",
    "consumer_groups_describe",
    "consumer_perf_test",
    "jars_dir",
    "parse_consumer_groups_describe",
    "parse_consumer_perf_test",
    "run_tool",
    "tool_command",
    "with_bootstrap",
]

#: The tools the CLI passthrough (``lagsched-dev kafka-tool <name>``) knows, by the name of their
#: ``bin/kafka-<name>.sh`` script in Kafka's distribution.
TOOLS: Mapping[str, str] = {
    "consumer-groups": "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
    "consumer-perf-test": "org.apache.kafka.tools.ConsumerPerformance",
    "producer-perf-test": "org.apache.kafka.tools.ProducerPerformance",
    "topics": "org.apache.kafka.tools.TopicCommand",
    "get-offsets": "org.apache.kafka.tools.GetOffsetShell",
    "console-consumer": "org.apache.kafka.tools.consumer.ConsoleConsumer",
}

#: Heap of a tool's JVM; Kafka's own scripts give tools 256 MB, the perf test streams with less.
TOOL_HEAP = "512m"


class KafkaToolError(RuntimeError):
    """A Kafka tool could not run (no java, no jars), timed out, or reported a failure; the message says which."""


class GroupNotFoundError(KafkaToolError):
    """The consumer group does not exist on the cluster (no committed offset, no member)."""


@dataclass(frozen=True, slots=True)
class GroupOffsetRow:
    """One row of ``kafka-consumer-groups --describe``: a partition's committed offset and lag.

    ``None`` stands for the tool's ``-``: no committed offset (then no lag either), or no member.
    """

    group: str
    topic: str
    partition: int
    current_offset: int | None
    log_end_offset: int | None
    #: Log end offset minus the committed offset, as the tool computes it.
    lag: int | None
    consumer_id: str | None
    host: str | None
    client_id: str | None


@dataclass(frozen=True, slots=True)
class PerfResult:
    """One ``kafka-consumer-perf-test`` run, as the tool prints it (rates per second of its own clock)."""

    records: int
    megabytes: float
    #: Over the whole run, joining the consumer group included.
    records_per_s: float
    mb_per_s: float
    #: Time spent joining the group (the tool subscribes), excluded from the fetch rates.
    rebalance_ms: int
    fetch_ms: int
    #: The reading rate proper: records over ``fetch_ms``.
    fetch_records_per_s: float
    fetch_mb_per_s: float
    #: False if the tool gave up (``--timeout`` without a record) before reading the records asked for.
    complete: bool
    #: Wall time of the whole process as measured here, the JVM's start included (not the tool's figure).
    wall_s: float = 0.0


def jars_dir() -> Path:
    """The folder of Kafka's jars: ``LAGSCHED_KAFKA_JARS``, else the local stack's (``.local/jars/kafka``)."""
    raw = os.environ.get("LAGSCHED_KAFKA_JARS")
    if raw:
        return Path(raw)
    from lagsched_dev.stack.config import load

    return load().kafka_jars


def _java() -> str:
    java_home = os.environ.get("JAVA_HOME")
    if java_home and Path(java_home, "bin", "java").exists():
        return str(Path(java_home, "bin", "java"))
    found = shutil.which("java")
    if found is None:
        raise KafkaToolError("java is not installed (nor JAVA_HOME set); run `make deps` (it installs a JDK)")
    return found


def with_bootstrap(tool: str, args: Sequence[str], bootstrap: str) -> list[str]:
    """``args`` with the broker address added the way ``tool`` takes it, unless they already name one.

    >>> with_bootstrap("consumer-groups", ["--list"], "127.0.0.1:19092")
    ['--bootstrap-server', '127.0.0.1:19092', '--list']
    >>> with_bootstrap("producer-perf-test", ["--producer-props", "acks=1"], "b:1")
    ['--producer-props', 'bootstrap.servers=b:1', 'acks=1']
    >>> with_bootstrap("producer-perf-test", ["--topic", "t"], "b:1")
    ['--topic', 't', '--producer-props', 'bootstrap.servers=b:1']
    """
    args = list(args)
    if tool != "producer-perf-test":
        return args if "--bootstrap-server" in args else ["--bootstrap-server", bootstrap, *args]
    # kafka-producer-perf-test (4.1) has no --bootstrap-server: the address is a producer property.
    if any(a.startswith("bootstrap.servers=") for a in args) or "--producer.config" in args:
        return args
    if "--producer-props" in args:
        at = args.index("--producer-props") + 1
        return [*args[:at], f"bootstrap.servers={bootstrap}", *args[at:]]
    return [*args, "--producer-props", f"bootstrap.servers={bootstrap}"]


def tool_command(tool: str, args: Sequence[str], *, jars: Path | None = None) -> list[str]:
    """The ``java -cp ...`` argv that runs Kafka's ``tool`` (a :data:`TOOLS` name or a class name).

    Raises :class:`KafkaToolError` when java or the kafka-tools jar is missing.
    """
    main_class = TOOLS.get(tool, tool)
    if "." not in main_class:
        raise KafkaToolError(f"unknown Kafka tool {tool!r}; known: {', '.join(sorted(TOOLS))} (or a class name)")
    folder = jars if jars is not None else jars_dir()
    if not any(folder.glob("kafka-tools-[0-9]*.jar")):
        raise KafkaToolError(
            f"Kafka's CLI tools are not in {folder} (no kafka-tools-*.jar); run `make deps` "
            "(or set LAGSCHED_KAFKA_JARS to the libs/ folder of a Kafka distribution)"
        )
    return [
        _java(), f"-Xmx{TOOL_HEAP}", "-XX:+UseG1GC", "-Djava.awt.headless=true",
        "-cp", str(folder / "*"), main_class, *args,
    ]  # fmt: skip


def run_tool(
    tool: str, args: Sequence[str], *, timeout_s: float = 120.0, jars: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """Run a Kafka tool to completion, capturing its output; non-zero exit or timeout raise :class:`KafkaToolError`."""
    argv = tool_command(tool, args, jars=jars)
    shown = f"kafka-{tool}" if tool in TOOLS else tool
    try:
        result = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False)  # noqa: S603
    except subprocess.TimeoutExpired as exc:
        raise KafkaToolError(
            f"{shown} {' '.join(args)} did not finish within {timeout_s:.0f} s (killed){_tail(exc.stderr)}"
        ) from None
    if result.returncode != 0:
        raise KafkaToolError(
            f"{shown} {' '.join(args)} exited with status {result.returncode}{_tail(result.stderr or result.stdout)}"
        )
    return result


def consumer_groups_describe(
    bootstrap: str, group: str, *, timeout_s: float = 60.0, jars: Path | None = None
) -> list[GroupOffsetRow]:
    """Every partition ``kafka-consumer-groups --describe --group <group>`` reports, as the tool computes it.

    Partitions with neither a committed offset nor a member do not appear (the tool omits them).
    Raises :class:`GroupNotFoundError` for an unknown group, :class:`KafkaToolError` on any other failure
    (the tool exits 0 after printing ``Error: ...``; that line is the message).
    """
    result = run_tool(
        "consumer-groups",
        ["--bootstrap-server", bootstrap, "--describe", "--group", group],
        timeout_s=timeout_s,
        jars=jars,
    )
    return parse_consumer_groups_describe(result.stdout, group)


def consumer_perf_test(
    bootstrap: str,
    topic: str,
    messages: int,
    *,
    group: str | None = None,
    idle_timeout_ms: int = 10_000,
    fetch_size: int | None = None,
    consumer_config: Mapping[str, str] | None = None,
    timeout_s: float = 600.0,
    jars: Path | None = None,
) -> PerfResult:
    """Read ``messages`` records of ``topic`` from its start with ``kafka-consumer-perf-test``; its figures.

    The tool subscribes as a member of ``group`` (default: a fresh ``perf-consumer-<n>``), so a group
    with committed offsets resumes from them; ``idle_timeout_ms`` is its ``--timeout`` (the longest gap
    between records before it gives up, which makes ``complete`` false). ``consumer_config`` is passed
    as its ``--consumer.config`` properties file (e.g. ``{"max.poll.records": "2000"}``).
    """
    if messages < 1:
        raise ValueError(f"messages={messages}: the perf test needs at least 1 record to read")
    args = ["--bootstrap-server", bootstrap, "--topic", topic, "--messages", str(messages),
            "--timeout", str(idle_timeout_ms)]  # fmt: skip
    if group is not None:
        args += ["--group", group]
    if fetch_size is not None:
        args += ["--fetch-size", str(fetch_size)]
    with tempfile.TemporaryDirectory(prefix="lagsched-perf-") as tmp:
        if consumer_config:
            props = Path(tmp) / "consumer.properties"
            props.write_text("".join(f"{k}={v}\n" for k, v in consumer_config.items()))
            args += ["--consumer.config", str(props)]
        started = time.monotonic()
        result = run_tool("consumer-perf-test", args, timeout_s=timeout_s, jars=jars)
        wall_s = time.monotonic() - started
    return dataclasses.replace(parse_consumer_perf_test(result.stdout), wall_s=wall_s)


def parse_consumer_groups_describe(stdout: str, group: str) -> list[GroupOffsetRow]:
    """The rows of ``kafka-consumer-groups --describe`` output (Kafka 4.x layout), ``-`` as None.

    Columns are found by the header's names, and a row is split after the group's own name, so a
    group id with spaces parses too.

    >>> out = '''
    ... GROUP   TOPIC   PARTITION  CURRENT-OFFSET  LOG-END-OFFSET  LAG   CONSUMER-ID  HOST  CLIENT-ID
    ... my g    orders  1          100             100             0     -            -     -
    ... my g    orders  0          10              2500            2490  -            -     -
    ... my g    orders  2          -               7               -     -            -     -
    ... '''
    >>> [(r.partition, r.current_offset, r.log_end_offset, r.lag) for r in parse_consumer_groups_describe(out, "my g")]
    [(0, 10, 2500, 2490), (1, 100, 100, 0), (2, None, 7, None)]
    >>> parse_consumer_groups_describe("\\nConsumer group 'g' has no active members.\\n", "g")
    []
    >>> parse_consumer_groups_describe("Error: Executing consumer group command failed due to "
    ...     "org.apache.kafka.common.errors.GroupIdNotFoundException: Group g not found.", "g")
    Traceback (most recent call last):
    ...
    lagsched_dev.kafka_tools.GroupNotFoundError: kafka-consumer-groups --describe --group 'g': Error: ...
    """
    lines = stdout.splitlines()
    for line in lines:
        if line.startswith("Error:"):
            error = GroupNotFoundError if "GroupIdNotFoundException" in line else KafkaToolError
            raise error(f"kafka-consumer-groups --describe --group {group!r}: {line.strip()}")
    rows: list[GroupOffsetRow] = []
    header: list[str] | None = None
    for line in lines:
        words = line.split()
        if words[:3] == ["GROUP", "TOPIC", "PARTITION"]:
            header = words
            continue
        if header is None or not line.startswith(group + " "):
            continue
        fields = line[len(group) :].split(None, len(header) - 2)
        if len(fields) != len(header) - 1:
            raise KafkaToolError(f"kafka-consumer-groups printed a row lagsched cannot read: {line!r}")
        value = dict(zip(header[1:], fields, strict=True))
        rows.append(
            GroupOffsetRow(
                group=group,
                topic=value["TOPIC"],
                partition=int(value["PARTITION"]),
                current_offset=_int_or_none(value["CURRENT-OFFSET"]),
                log_end_offset=_int_or_none(value["LOG-END-OFFSET"]),
                lag=_int_or_none(value["LAG"]),
                consumer_id=_str_or_none(value.get("CONSUMER-ID", "-")),
                host=_str_or_none(value.get("HOST", "-")),
                client_id=_str_or_none(value.get("CLIENT-ID", "-")),
            )
        )
    return sorted(rows, key=lambda r: (r.topic, r.partition))


def parse_consumer_perf_test(stdout: str) -> PerfResult:
    r"""The figures of ``kafka-consumer-perf-test`` (default, non-detailed output).

    >>> header = ("start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, "
    ...           "rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec")
    >>> figures = ("2026-11-21 21:07:59:381, 2026-11-21 21:08:00:310, "
    ...            "0.0289, 0.0311, 300, 322.9279, 546, 383, 0.0754, 783.2898")
    >>> out = "\n".join([header, figures])
    >>> r = parse_consumer_perf_test(out)
    >>> (r.records, r.records_per_s, r.fetch_records_per_s, r.rebalance_ms, r.complete)
    (300, 322.9279, 783.2898, 546, True)
    >>> warned = "\n".join([header, "WARNING: Exiting before consuming the expected number of messages: ...", figures])
    >>> parse_consumer_perf_test(warned).complete
    False
    """
    lines = [line.strip() for line in stdout.splitlines()]
    try:
        start = next(i for i, line in enumerate(lines) if line.startswith("start.time,"))
    except StopIteration:
        raise KafkaToolError(f"kafka-consumer-perf-test printed no results{_tail(stdout)}") from None
    names = [n.strip() for n in lines[start].split(",")]
    for line in lines[start + 1 :]:
        fields = [f.strip() for f in line.split(",")]
        if len(fields) != len(names):
            continue  # a WARNING line between the header and the figures
        value = dict(zip(names, fields, strict=True))
        try:
            return PerfResult(
                records=int(value["data.consumed.in.nMsg"]),
                megabytes=float(value["data.consumed.in.MB"]),
                records_per_s=float(value["nMsg.sec"]),
                mb_per_s=float(value["MB.sec"]),
                rebalance_ms=int(value["rebalance.time.ms"]),
                fetch_ms=int(value["fetch.time.ms"]),
                fetch_records_per_s=float(value["fetch.nMsg.sec"]),
                fetch_mb_per_s=float(value["fetch.MB.sec"]),
                complete="Exiting before consuming the expected number" not in stdout,
            )
        except (KeyError, ValueError) as exc:
            raise KafkaToolError(f"kafka-consumer-perf-test printed figures it cannot read ({exc}): {line!r}") from None
    raise KafkaToolError(f"kafka-consumer-perf-test printed a header but no figures{_tail(stdout)}")


def _int_or_none(raw: str) -> int | None:
    return None if raw == "-" else int(raw)


def _str_or_none(raw: str) -> str | None:
    return None if raw == "-" else raw


def _tail(text: str | bytes | None, lines: int = 15) -> str:
    """The useful part of a tool's output: its usage table cut off, then the first and last lines.

    A usage error prints its one-line reason above a long option table; a Java failure puts the
    exception first and the causes last.

    >>> print(_tail("no-such is not a recognized option\\nOption   Description\\n------   -----\\n--x  y"))
    :
      no-such is not a recognized option
    """
    if not text:
        return ""
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    kept = text.strip().splitlines()
    usage = next((i for i, line in enumerate(kept) if line.split()[:2] == ["Option", "Description"]), None)
    if usage is not None:
        kept = kept[:usage]
    if len(kept) > lines:
        kept = [*kept[:3], "...", *kept[-(lines - 3) :]]
    return ":\n" + "\n".join(f"  {line}" for line in kept)
