"""The shipped alert rules and dashboard queries on a real Prometheus, scraping the real lagsched page.

One module-scoped run shares everything: a real Prometheus (`lagsched_dev.stack.services.Prometheus`,
1 s scrape and evaluation intervals) scrapes ``/lagsched/metrics`` of the stack's Airflow API server
with the stack's scrape token and evaluates the shipped rules, their ``for:`` durations shortened
(`shortened_rules`: nothing else differs, every ``expr`` is the shipped one byte for byte). Under a
cluster of its own, in the stack's MySQL database and Redis DB 0 (where the page reads), one real
consumer slot consumes a topic a producer keeps writing to, and the lag monitor's measure step runs
every `MEASURE_EVERY_S` in a thread of the test, as the lag monitor DAG would run it.

The tests run in file order, each on the state the one before left:
1. a healthy run fires nothing;
2. every dashboard query returns a series;
3. the slot frozen with SIGSTOP fires LagschedTopicStalled, then (the topic at its max_workers, its
   time lag growing) LagschedLagRisingAtMaxWorkers and LagschedTopicTimeLagHigh; records deleted past
   its committed offsets meanwhile fire LagschedRecordsLost; SIGCONT resolves the stall;
4. a producer's transaction left open fires LagschedOpenTransactionOld, and its abort resolves it;
5. a registered topic the broker does not have fires LagschedTopicNotMeasured;
6. a second Prometheus whose scrape the page refuses (a wrong token) fires LagschedMetricsAbsent;
7. the slot leaving (SIGTERM) fires LagschedFewerLiveSlotsThanPlanned and, the producer writing on,
   LagschedTopicStopped;
8. the measure step stopped fires LagschedMeasurementsStale.
The thresholds are the measure step's settings (`monitor_settings`), as a deployment sets them in
`lagsched_settings`: short, so that each alert fires within seconds.
Each prints how long its alert took to fire (``TIME-TO-FIRE`` lines; run with ``-s`` to see them).
"""

from __future__ import annotations

import json
import re
import shutil
import signal
import socket
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib.resources import files
from pathlib import Path
from typing import Any

import pytest
import yaml

from lagsched_dev.airflow_api import AirflowAPI
from lagsched_dev.stack.config import StackConfig

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))  # consumer_support

from consumer_support import ConsumerHarness, produce, wait_until

from stack_rows import delete_cluster_rows, delete_topic_rows

RULES = Path(str(files("lagsched") / "monitoring" / "alerts.yml"))
DASHBOARD = Path(str(files("lagsched") / "monitoring" / "dashboard.json"))
#: The shortened ``for:`` of every rule, and Prometheus' scrape and evaluation intervals here.
FOR = "3s"
FOR_S = 3.0
INTERVAL_S = 1.0
#: The measure step's period here (the lag monitor DAG's is a minute).
MEASURE_EVERY_S = 2.0
#: Measurements without a committed offset moving that make a topic with a backlog stuck.
STALL_AFTER = 3
#: What `$__rate_interval` becomes in the dashboard's queries.
RATE_INTERVAL = "1m"
#: Seconds of slack on each bound: a loaded 2-core machine, Python threads, the page's own reads.
SLACK_S = 10.0
#: The topic's time-lag SLO and open-transaction bound here (settings `time_lag_slo_s`,
#: `open_transaction_bound_s`): a healthy slot stays within seconds of the head.
SLO_S = 20.0
TRANSACTION_BOUND_S = 5.0

#: Time-to-fire figures of this run, printed at the end of the module.
TIMINGS: dict[str, float] = {}


def shortened_rules(text: str, duration: str) -> str:
    """The rules file ``text`` with every rule's ``for:`` set to ``duration``; nothing else changes.

    The shipped rules wait minutes before they fire; a test cannot. Only the ``for:`` lines are
    rewritten, so the expressions, labels and annotations evaluated are the shipped ones.

    >>> shortened_rules("  - alert: A\\n    expr: x > 1\\n    for: 10m\\n", "3s")
    '  - alert: A\\n    expr: x > 1\\n    for: 3s\\n'
    """
    return re.sub(r"(?m)^(\s+for: )\S+[ \t]*$", lambda m: m.group(1) + duration, text)


def test_the_shortened_rules_differ_from_the_shipped_ones_in_for_alone() -> None:
    shipped = RULES.read_text()
    short = shortened_rules(shipped, FOR)
    changed = [(a, b) for a, b in zip(shipped.splitlines(), short.splitlines(), strict=True) if a != b]
    assert changed and all(re.fullmatch(r"\s+for: \S+", a) and b.endswith(f"for: {FOR}") for a, b in changed)

    def rules(text: str) -> list[dict[str, Any]]:
        return [r for g in yaml.safe_load(text)["groups"] for r in g["rules"]]

    for a, b in zip(rules(shipped), rules(short), strict=True):
        assert a["expr"] == b["expr"]  # byte-identical
        assert {k: v for k, v in a.items() if k != "for"} == {k: v for k, v in b.items() if k != "for"}


# -- Prometheus' HTTP API ------------------------------------------------------------------------


@dataclass
class PromAPI:
    url: str

    def _get(self, path: str, **params: str) -> Any:
        query = urllib.parse.urlencode(params)
        try:
            with urllib.request.urlopen(f"{self.url}{path}?{query}", timeout=30) as resp:
                body = json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            raise AssertionError(f"Prometheus {path} {params}: {exc.code} {exc.read()[:500]!r}") from None
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """The instant vector of ``expr`` now."""
        data = self._get("/api/v1/query", query=expr)
        return list(data["result"]) if data["resultType"] == "vector" else [data["result"]]

    def all_alerts(self) -> list[dict[str, Any]]:
        """Every active (pending or firing) alert."""
        return list(self._get("/api/v1/alerts")["alerts"])

    def alerts(self, cluster: str) -> list[dict[str, Any]]:
        """Active alerts of ``cluster``."""
        return [a for a in self.all_alerts() if a["labels"].get("cluster") == cluster]

    def targets(self) -> list[dict[str, Any]]:
        return list(self._get("/api/v1/targets")["activeTargets"])


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_prometheus(stack: StackConfig, folder: Path, name: str, token: str | None = None) -> Any:
    """A real Prometheus of its own (``name``, a free port, its data wiped first), 1 s intervals, the
    shipped rules with short ``for:`` (written to ``folder``), scraping the stack's Airflow with the
    stack's token or ``token``; started, or the test fails (never a skip)."""
    from lagsched_dev.stack.process import ServiceError
    from lagsched_dev.stack.services import Prometheus

    rules = folder / "alerts.yml"
    rules.write_text(shortened_rules(RULES.read_text(), FOR))
    service = Prometheus(
        stack,
        name=name,
        port=free_port(),
        scrape_interval_s=INTERVAL_S,
        evaluation_interval_s=INTERVAL_S,
        rule_files=[rules],
        token=token,
    )
    service.stop()  # one a killed run left behind
    shutil.rmtree(service.dir / "data", ignore_errors=True)  # no series of an earlier run
    try:
        service.start()
    except ServiceError as exc:
        pytest.fail(f"Prometheus could not start: {exc}", pytrace=False)
    return service


def stop_prometheus(service: Any) -> None:
    service.stop()
    shutil.rmtree(service.dir / "data", ignore_errors=True)


@pytest.fixture(scope="module")
def prometheus(airflow: AirflowAPI, stack: StackConfig, tmp_path_factory: pytest.TempPathFactory) -> Iterator[PromAPI]:
    """A real Prometheus of this module (its own name, port and data), 1 s intervals, the shipped rules
    with short ``for:``, scraping the stack's Airflow with the stack's scrape token."""
    from lagsched_dev.stack.config import stack_secrets

    token = stack_secrets(stack)["LAGSCHED_METRICS_TOKEN"]
    request = urllib.request.Request(
        f"{airflow.base_url}/lagsched/metrics", headers={"Authorization": f"Bearer {token}"}
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as resp:
            accepted = resp.status == 200
    except urllib.error.HTTPError:
        accepted = False
    if not accepted:
        pytest.fail(
            "the running Airflow refuses the stack's scrape token: it was started without LAGSCHED_METRICS_TOKEN "
            "(by a checkout from before the token). Restart it: `lagsched-dev stack down`, then run again.",
            pytrace=False,
        )
    service = start_prometheus(stack, tmp_path_factory.mktemp("prometheus"), "prometheus-e2e")
    assert oct(service.token_file.stat().st_mode & 0o777) == "0o600"
    assert token not in service.log.read_text()
    api = PromAPI(service.url)
    wait_until(lambda: any(t["health"] == "up" for t in api.targets()), 60, "the first scrape of /lagsched/metrics")
    yield api
    stop_prometheus(service)
    if TIMINGS:
        print("\nTIME-TO-FIRE (seconds, from the event to the alert firing):")
        for what, seconds in TIMINGS.items():
            print(f"  {what:<55} {seconds:6.1f}")


# -- The pipeline: a slot, a producer and the measure step ---------------------------------------


class Producer(threading.Thread):
    """Keeps writing ~``rate`` records/s to ``topic`` (round robin over its partitions)."""

    def __init__(self, kafka_config: dict[str, Any], topic: str, partitions: int, rate: float = 100.0) -> None:
        super().__init__(daemon=True, name="producer")
        self.kafka_config, self.topic, self.partitions, self.rate = kafka_config, topic, partitions, rate
        self.stop_event = threading.Event()
        self.sent = 0

    def run(self) -> None:
        from confluent_kafka import Producer as KafkaProducer

        producer = KafkaProducer({**self.kafka_config, "linger.ms": 20})
        while not self.stop_event.wait(0.1):
            for _ in range(int(self.rate / 10)):
                producer.produce(self.topic, value=b"x" * 100, partition=self.sent % self.partitions)
                self.sent += 1
            producer.poll(0)
        producer.flush(30)


class Measurer(threading.Thread):
    """The lag monitor's measure step for one cluster, every `MEASURE_EVERY_S`, until stopped."""

    def __init__(self, cluster: str, settings: dict[str, Any]) -> None:
        super().__init__(daemon=True, name="measure")
        self.cluster, self.settings = cluster, settings
        self.stop_event = threading.Event()
        self.runs = 0
        self.last_at = 0.0
        self.error: BaseException | None = None

    def run(self) -> None:
        from confluent_kafka.admin import AdminClient

        from lagsched.adapters.lag_store import LagStore
        from lagsched.adapters.mysql import connect
        from lagsched.adapters.redis_store import redis_client
        from lagsched.connections import kafka_config, mysql_params, redis_params
        from lagsched.core.config import parse_settings
        from lagsched.workflows.lag_monitor import measure

        s = parse_settings(self.settings)
        conn = connect(mysql_params())
        redis = redis_client(redis_params())
        admin = AdminClient(kafka_config())
        store = LagStore(redis, self.cluster, max_samples=s.sample_window, max_age_s=s.sample_ttl_s)
        try:
            while not self.stop_event.is_set():
                started = time.monotonic()
                measure(self.cluster, mysql=conn, admin=admin, store=store, settings=s, now=datetime.now(UTC))
                self.runs += 1
                self.last_at = time.time()
                self.stop_event.wait(max(0.0, MEASURE_EVERY_S - (time.monotonic() - started)))
        except BaseException as exc:  # noqa: BLE001 - reported by the tests, which check `error`
            self.error = exc
        finally:
            conn.close()
            redis.close()

    def halt(self) -> None:
        self.stop_event.set()
        self.join(60)


def monitor_settings() -> dict[str, Any]:
    """The measure step's settings: stuck after `STALL_AFTER` measurements, and stale as early as the
    settings allow (`stale_after_s` >= `measure_every_s`, itself at least the DAG's minute). The
    measure step itself runs every `MEASURE_EVERY_S`: `measure_every_s` only paces the DAG."""
    from lagsched.core.lag import MONITOR_SCHEDULE_S

    lowest = MONITOR_SCHEDULE_S  # what measure_every_s may be at least
    return {
        "measure_every_s": lowest,
        "stale_after_s": lowest,
        "defaults": {
            "stall_after_measurements": STALL_AFTER,
            "time_lag_slo_s": SLO_S,
            "open_transaction_bound_s": TRANSACTION_BOUND_S,
            # one worker of its two partitions: the topic runs at its ceiling throughout
            "max_workers": 1,
        },
    }


@dataclass
class Pipeline:
    cluster: str
    topic: str
    partitions: int
    topic_id: str
    harness: ConsumerHarness
    slot: Any
    producer: Producer
    measurer: Measurer
    prom: PromAPI

    def alerts(self) -> list[dict[str, Any]]:
        return self.prom.alerts(self.cluster)

    def alert(self, name: str, state: str = "firing") -> dict[str, Any] | None:
        return next((a for a in self.alerts() if a["labels"]["alertname"] == name and a["state"] == state), None)


def plan_slots(cluster: str, slots: int) -> None:
    """Record ``slots`` planned for ``cluster``, as the consume DAG's plan does (one slot here)."""
    from lagsched.adapters.alert_figures import write_planned_slots
    from lagsched.adapters.redis_store import redis_client
    from lagsched.connections import redis_params

    redis = redis_client(redis_params())
    try:
        write_planned_slots(redis, {cluster: slots})
    finally:
        redis.close()


def drop_cluster(cluster: str, lake: Any) -> None:
    """Every row and key of ``cluster`` in the stack's MySQL database and Redis DB 0, and its lake
    table's entry in the Iceberg catalog there (the table's files go with the test's folder)."""
    from lagsched.adapters.mysql import connect
    from lagsched.adapters.redis_store import redis_client
    from lagsched.connections import mysql_params, redis_params

    conn = connect(mysql_params())
    try:
        with conn.cursor() as cur:
            delete_cluster_rows(cur, cluster)
            cur.execute("SHOW TABLES LIKE 'iceberg_tables'")  # made by the first slot that made a table
            if cur.fetchone() is not None:
                cur.execute(
                    "DELETE FROM iceberg_tables WHERE catalog_name = %s AND table_namespace = %s AND table_name = %s",
                    (lake.catalog, lake.namespace, lake.table),
                )
        conn.commit()
    finally:
        conn.close()
    redis = redis_client(redis_params())
    try:
        keys = list(redis.scan_iter(match=f"*{cluster}*", count=1000))
        if keys:
            redis.delete(*keys)
    finally:
        redis.close()


@pytest.fixture(scope="module")
def pipeline(prometheus: PromAPI, stack: StackConfig, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pipeline]:
    from lagsched.connections import kafka_config as resolve_kafka
    from lagsched.connections import mysql_params
    from scratch import scratch_topics

    config = resolve_kafka()
    cluster = f"e2e-prom-{uuid.uuid4().hex[:8]}"
    partitions = 2
    with scratch_topics(config) as new_topic:
        topic = new_topic(partitions, prefix="prom")
        # The stack's database and Redis DB 0: where the running Airflow's page reads.
        harness = ConsumerHarness(mysql_params(), config, 0, cluster, tmp_path_factory.mktemp("slots"))
        producer = Producer(config, topic, partitions)
        measurer = Measurer(cluster, monitor_settings())
        try:
            produce(config, topic, 2_000, partitions=partitions)
            topic_id = harness.register(topic)
            plan_slots(cluster, 1)
            producer.start()
            # A lease that outlives the freeze: a frozen slot keeps its partitions (stalled, not stopped).
            slot = harness.start("w1", "--max-records", "2000", "--min-interval-s", "0.5", "--lease-s", "300")
            wait_until(lambda: len(slot.batches()) >= 1, 240, "the slot's first batch")
            measurer.start()
            p = Pipeline(cluster, topic, partitions, topic_id, harness, slot, producer, measurer, prometheus)
            wait_until(
                lambda: prometheus.query(f'lagsched_topic_measured_timestamp_seconds{{cluster="{cluster}"}}'),
                60,
                "the first measurement in Prometheus",
            )
            # Until the first measurement the topic was registered and not measured (and before the
            # slot's first batch it was not consumed): what fired for that resolves now.
            wait_until(lambda: not p.alerts(), 30, "the set-up's alerts resolved")
            yield p
        finally:
            measurer.halt()
            producer.stop_event.set()
            producer.join(60)
            harness.stop_all()
            drop_cluster(cluster, harness.lake)


def check_measurer(p: Pipeline) -> None:
    assert p.measurer.error is None, f"the measure step failed: {p.measurer.error!r}"


# -- The scenarios -------------------------------------------------------------------------------


def test_a_healthy_run_fires_nothing(pipeline: Pipeline) -> None:
    p = pipeline
    seen: dict[str, str] = {}
    window = 3 * FOR_S + 4 * MEASURE_EVERY_S + 5  # every `for:` over several times, a few measurements
    end = time.monotonic() + window
    runs = p.measurer.runs
    while time.monotonic() < end:
        for a in p.alerts():
            seen[a["labels"]["alertname"]] = a["state"]
        time.sleep(INTERVAL_S / 2)
    check_measurer(p)
    assert p.measurer.runs >= runs + 3, "the measure step did not keep up"
    assert p.slot.proc.poll() is None, p.slot.tail()
    assert not seen, f"alerts on a healthy pipeline: {seen}"
    up = p.prom.query(f'lagsched_topic_state{{cluster="{p.cluster}",state="ok"}} == 1')
    assert [s["metric"]["topic"] for s in up] == [p.topic]


def dashboard_queries() -> list[tuple[str, str]]:
    """(where, expr) of every panel target and annotation of the shipped dashboard."""
    dash = json.loads(DASHBOARD.read_text())
    out = [(f"panel {panel['title']!r} {t['refId']}", t["expr"]) for panel in dash["panels"] for t in panel["targets"]]
    out += [(f"annotation {a['name']!r}", a["expr"]) for a in dash["annotations"]["list"] if "expr" in a]
    return out


def expand(expr: str, cluster: str, topic: str) -> str:
    """A dashboard query as Grafana sends it for one cluster and topic."""
    return (
        # Kafka's topic names have no regex character but ".", which matches itself.
        expr.replace("$__rate_interval", RATE_INTERVAL).replace("$cluster", cluster).replace("$topic", topic)
    )


def test_every_dashboard_query_returns_a_series(pipeline: Pipeline) -> None:
    from lagsched.adapters.mysql import connect
    from lagsched.connections import mysql_params

    p = pipeline
    dash = json.loads(DASHBOARD.read_text())
    inputs = {i["name"]: i["pluginId"] for i in dash["__inputs"]}
    assert inputs == {"DS_PROMETHEUS": "prometheus"}
    variables = {v["name"]: v["query"]["query"] for v in dash["templating"]["list"]}
    assert set(variables) == {"cluster", "topic"}
    # The variables' label_values(...) as Grafana resolves them: the series' label values.
    for name, query in variables.items():
        m = re.fullmatch(r"label_values\((.+), (\w+)\)", query)
        assert m, query
        values = {s["metric"].get(m.group(2)) for s in p.prom.query(expand(m.group(1), p.cluster, p.topic))}
        assert {"cluster": p.cluster, "topic": p.topic}[name] in values, (name, values)

    # A scaling decision for the annotation: linker_workers 1 -> 2 -> 1, as the evaluator would apply.
    def set_workers(n: int) -> None:
        conn = connect(mysql_params())
        try:
            with conn.cursor() as cur:
                cur.execute("UPDATE topics SET linker_workers = %s WHERE topic_id = %s", (n, p.topic_id))
            conn.commit()
        finally:
            conn.close()

    set_workers(2)
    try:
        wait_until(
            lambda: p.prom.query(f'lagsched_topic_linker_workers{{cluster="{p.cluster}"}} == 2'),
            30,
            "linker_workers 2 in Prometheus",
        )
    finally:
        set_workers(1)
    wait_until(
        lambda: p.prom.query(f'lagsched_topic_linker_workers{{cluster="{p.cluster}"}} == 1'),
        30,
        "linker_workers 1 in Prometheus",
    )
    empty = []
    for where, expr in dashboard_queries():
        if not p.prom.query(expand(expr, p.cluster, p.topic)):
            empty.append(f"{where}: {expr}")
    assert not empty, "dashboard queries without a series:\n" + "\n".join(empty)


def test_a_frozen_slot_fires_stalled_records_deleted_meanwhile_fire_lost_and_a_thaw_resolves(
    pipeline: Pipeline, stack: StackConfig
) -> None:
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    p = pipeline
    assert p.alert("LagschedTopicStalled", "pending") is None and p.alert("LagschedTopicStalled") is None
    # Stuck after STALL_AFTER measurements without a move, counted from the first one after the
    # freeze; then a scrape, an evaluation, the `for:` and the next evaluation.
    bound = (STALL_AFTER + 2) * MEASURE_EVERY_S + 3 * INTERVAL_S + FOR_S + SLACK_S
    cut: dict[int, int] = {}
    p.slot.signal(signal.SIGSTOP)
    frozen = time.monotonic()
    try:
        took = wait_until(lambda: p.alert("LagschedTopicStalled") is not None, bound, "LagschedTopicStalled")
        TIMINGS["LagschedTopicStalled (SIGSTOP -> firing)"] = took
        print(f"TIME-TO-FIRE LagschedTopicStalled {took:.1f} s after SIGSTOP (bound {bound:.0f} s)")
        fired = p.alert("LagschedTopicStalled")
        assert fired is not None and fired["labels"]["topic"] == p.topic

        # The backlog grows at the topic's ceiling: past half its SLO the lag rising at max_workers
        # fires, past the SLO the time lag. The oldest unread record is about as old as the freeze.
        for name, threshold_s in (("LagschedLagRisingAtMaxWorkers", SLO_S / 2), ("LagschedTopicTimeLagHigh", SLO_S)):
            bound = threshold_s + MEASURE_EVERY_S + 3 * INTERVAL_S + FOR_S + SLACK_S
            assert fires(p, name, bound, frozen, "SIGSTOP")["labels"]["topic"] == p.topic

        # Retention (here Kafka's DeleteRecords) removes records the frozen slot has not read.
        committed = p.harness.committed(p.topic_id)
        admin = AdminClient(p.harness.kafka_config)
        from consumer_support import latest_offsets

        head = latest_offsets(p.harness.kafka_config, p.topic, p.partitions)
        cut.update(head)
        assert all((committed[q] or 0) < cut[q] for q in cut), (committed, cut)
        for f in admin.delete_records([TopicPartition(p.topic, q, o) for q, o in cut.items()]).values():
            f.result(30)
        lost_bound = MEASURE_EVERY_S + 3 * INTERVAL_S + SLACK_S
        took = wait_until(lambda: p.alert("LagschedRecordsLost") is not None, lost_bound, "LagschedRecordsLost")
        TIMINGS["LagschedRecordsLost (DeleteRecords -> firing)"] = took
        print(f"TIME-TO-FIRE LagschedRecordsLost {took:.1f} s after DeleteRecords (bound {lost_bound:.0f} s)")
        lost = p.prom.query(f'lagsched_topic_lost_records{{cluster="{p.cluster}"}}')
        expected = sum(cut[q] - (committed[q] or 0) for q in cut)
        assert [float(s["value"][1]) for s in lost] == [float(expected)]
    finally:
        p.slot.signal(signal.SIGCONT)
    thawed = time.monotonic()
    check_measurer(p)
    # The slot skips the deleted range (a retention gap) and commits again: the topic is ok again.
    took = wait_until(lambda: p.alert("LagschedTopicStalled") is None, 120, "LagschedTopicStalled resolved")
    TIMINGS["LagschedTopicStalled resolved (SIGCONT -> gone)"] = took
    print(f"TIME-TO-RESOLVE LagschedTopicStalled {took:.1f} s after SIGCONT (frozen {thawed - frozen:.1f} s)")
    assert p.slot.proc.poll() is None, p.slot.tail()
    assert p.alert("LagschedTopicStopped") is None
    # It went on past the deleted records (skipped as a retention gap), and they stay counted as lost.
    wait_until(
        lambda: all((p.harness.committed(p.topic_id)[q] or 0) >= cut[q] for q in cut), 60, "commits past the cut"
    )
    assert p.alert("LagschedRecordsLost") is not None


def fires(p: Pipeline, name: str, bound: float, since: float, event: str) -> dict[str, Any]:
    """Wait (at most ``bound`` s) for alert ``name`` of the pipeline's cluster to fire; record and print
    how long after ``since`` (a monotonic time) it took, and return it."""
    wait_until(lambda: p.alert(name) is not None, bound, name)
    took = time.monotonic() - since
    TIMINGS[f"{name} ({event} -> firing)"] = took
    print(f"TIME-TO-FIRE {name} {took:.1f} s after {event} (bound {bound:.0f} s)")
    fired = p.alert(name)
    assert fired is not None
    return fired


def test_an_open_transaction_fires_open_transaction_old_and_its_abort_resolves_it(pipeline: Pipeline) -> None:
    from confluent_kafka import Producer as KafkaProducer

    p = pipeline
    wait_until(lambda: p.alert("LagschedTopicTimeLagHigh") is None, 120, "the backlog of the freeze drained")
    producer = KafkaProducer({**p.harness.kafka_config, "transactional.id": f"e2e-prom-{uuid.uuid4().hex[:8]}"})
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(5):
        producer.produce(p.topic, value=b"open", partition=i % p.partitions)
    producer.flush(30)
    opened = time.monotonic()
    try:
        # The last stable offset stands from here: the bound, a measurement, a scrape, the `for:`.
        bound = TRANSACTION_BOUND_S + 2 * MEASURE_EVERY_S + 3 * INTERVAL_S + FOR_S + SLACK_S
        fired = fires(p, "LagschedOpenTransactionOld", bound, opened, "the transaction opened")
        assert fired["labels"]["topic"] == p.topic
        # The held records are not lag, and the slot waits at the stable offset: not stalled.
        assert p.alert("LagschedTopicStalled") is None and p.alert("LagschedTopicStopped") is None
    finally:
        producer.abort_transaction(30)
    aborted = time.monotonic()
    wait_until(lambda: p.alert("LagschedOpenTransactionOld") is None, 60, "LagschedOpenTransactionOld resolved")
    print(f"TIME-TO-RESOLVE LagschedOpenTransactionOld {time.monotonic() - aborted:.1f} s after the abort")
    check_measurer(p)


def test_a_registered_topic_the_broker_does_not_have_fires_not_measured(pipeline: Pipeline) -> None:
    from lagsched.adapters.mysql import connect
    from lagsched.connections import mysql_params

    p = pipeline
    missing, missing_id = f"prom-missing-{uuid.uuid4().hex[:8]}", str(uuid.uuid4())
    conn = connect(mysql_params())
    try:
        with conn.cursor() as cur:
            cur.execute(
                "INSERT INTO topics (topic_id, cluster, name, partition_count, retention_ms, linker_workers)"
                " VALUES (%s, %s, %s, 1, 3600000, 1)",
                (missing_id, p.cluster, missing),
            )
        conn.commit()
        added = time.monotonic()
        bound = 2 * MEASURE_EVERY_S + 3 * INTERVAL_S + FOR_S + SLACK_S
        fired = fires(p, "LagschedTopicNotMeasured", bound, added, "the topic was registered")
        assert fired["labels"]["topic"] == missing
        assert p.alert("LagschedMeasurementsStale") is None  # the measured topic is measured on
    finally:
        with conn.cursor() as cur:
            delete_topic_rows(cur, missing_id)  # the slot's assignment gave it an owner meanwhile
        conn.commit()
        conn.close()
    wait_until(lambda: p.alert("LagschedTopicNotMeasured") is None, 60, "LagschedTopicNotMeasured resolved")


def test_a_scrape_the_page_refuses_fires_metrics_absent(
    pipeline: Pipeline, stack: StackConfig, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """A second Prometheus, same rules, with a wrong token: the page answers 403, so it has no
    lagsched series at all, and only the alert on that can tell."""
    started = time.monotonic()
    folder = tmp_path_factory.mktemp("prometheus-wrong")
    service = start_prometheus(stack, folder, "prometheus-e2e-wrong-token", token="not-the-scrape-token")
    try:
        api = PromAPI(service.url)

        def absent_firing() -> bool:
            return any(
                a["labels"]["alertname"] == "LagschedMetricsAbsent" and a["state"] == "firing" for a in api.all_alerts()
            )

        bound = 3 * INTERVAL_S + FOR_S + SLACK_S
        wait_until(absent_firing, bound, "LagschedMetricsAbsent")
        took = time.monotonic() - started
        TIMINGS["LagschedMetricsAbsent (a refused scrape's Prometheus started -> firing)"] = took
        print(f"TIME-TO-FIRE LagschedMetricsAbsent {took:.1f} s after its Prometheus started (bound {bound:.0f} s)")
        # Why: the page refused the scrape (the target's health comes with its first scrape).
        wait_until(lambda: any(t["health"] == "down" for t in api.targets()), 30, "the refused scrape")
        target = api.targets()[0]
        assert "403" in target["lastError"], target
    finally:
        stop_prometheus(service)
    # The module's own Prometheus, whose scrape the page accepts, has the series: no such alert there.
    assert not [a for a in pipeline.prom.all_alerts() if a["labels"]["alertname"] == "LagschedMetricsAbsent"]


def test_the_slot_leaving_fires_fewer_live_slots_than_planned_and_stopped(pipeline: Pipeline) -> None:
    p = pipeline
    assert p.alert("LagschedFewerLiveSlotsThanPlanned") is None and p.alert("LagschedTopicStopped") is None
    p.slot.terminate()  # it finishes its batch, releases its rows and leaves the live set
    assert p.slot.wait(120) == 0, p.slot.tail()
    left = time.monotonic()
    bound = 3 * INTERVAL_S + FOR_S + SLACK_S
    fires(p, "LagschedFewerLiveSlotsThanPlanned", bound, left, "the slot left")
    # No holder, and the producer writes on: stuck after STALL_AFTER measurements without a move.
    bound = (STALL_AFTER + 2) * MEASURE_EVERY_S + 3 * INTERVAL_S + FOR_S + SLACK_S
    fired = fires(p, "LagschedTopicStopped", bound, left, "the slot left")
    assert fired["labels"]["topic"] == p.topic
    check_measurer(p)


def test_stopping_the_measure_step_fires_measurements_stale(pipeline: Pipeline) -> None:
    p = pipeline
    check_measurer(p)
    p.measurer.halt()
    last = p.measurer.last_at
    stale = p.prom.query(f'lagsched_measurements_stale_after_seconds{{cluster="{p.cluster}"}}')
    stale_after = float(stale[0]["value"][1])
    assert stale_after == monitor_settings()["stale_after_s"]  # the measure step's setting, exported
    bound = stale_after + FOR_S + 3 * INTERVAL_S + SLACK_S
    took = wait_until(
        lambda: p.alert("LagschedMeasurementsStale") is not None, bound + 5, "LagschedMeasurementsStale", poll=0.5
    )
    since_last = time.time() - last
    TIMINGS["LagschedMeasurementsStale (last measurement -> firing)"] = since_last
    print(
        f"TIME-TO-FIRE LagschedMeasurementsStale {since_last:.1f} s after the last measurement "
        f"({took:.1f} s after the stop; stale_after {stale_after:.0f} s, bound {bound:.0f} s)"
    )
    assert since_last <= bound
    fired = p.alert("LagschedMeasurementsStale")
    assert fired is not None and fired["labels"]["topic"] == p.topic
