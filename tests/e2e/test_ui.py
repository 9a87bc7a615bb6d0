"""The lagsched page in the running Airflow: every route refuses anonymous callers, serves logged-in
ones, and its JSON holds what was seeded through the real adapters.

The stack's Airflow reads the stack's MySQL database and Redis DB 0 (its ``lagsched_*``
Connections), so the seed goes there, under a cluster name of its own that no DAG manages, and is
removed afterwards. `seed_cluster` is shared with the browser test.
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pytest

from lagsched_dev.airflow_api import AirflowAPI
from stack_rows import delete_cluster_rows

#: Every route of the app (relative to its mount point), and whether it answers 200 when logged in.
ROUTES = [
    "/",
    "/static/lagsched.js",
    "/static/lagsched.css",
    "/static/icon.svg",
    "/api/clusters",
    "/api/status",
    "/metrics",
]


@dataclass
class Seed:
    cluster: str
    topic: str
    topic_id: str
    slots: list[str]
    reasons: list[str]
    cleanup: list[Callable[[], None]] = field(default_factory=list)


def seed_cluster(kafka_config: dict[str, Any], new_topic: Callable[..., str]) -> Seed:
    """A Kafka topic registered in a fresh cluster, two live slots holding its three partitions with
    committed offsets, two scaling decisions, twelve lag measurements and per-partition samples.

    Written to the stack's MySQL database and Redis DB 0, where the running Airflow reads.
    Call ``for f in reversed(seed.cleanup): f()`` afterwards.
    """
    from lagsched.adapters.claims import ClaimStore, server_lock_mode
    from lagsched.adapters.kafka_admin import admin_client
    from lagsched.adapters.lag_store import LagRecord, LagStore
    from lagsched.adapters.mysql import connect
    from lagsched.adapters.redis_store import redis_client
    from lagsched.adapters.slots import SlotLock, SlotRegistry, slot_id_for
    from lagsched.adapters.topics import load_topics
    from lagsched.adapters.worker_changes import apply_change
    from lagsched.connections import mysql_params, redis_params
    from lagsched.core.evaluator import Decision
    from lagsched.core.lag import OffsetSample
    from lagsched.workflows.topic_sync import sync_registry

    tag = uuid.uuid4().hex[:8]
    cluster = f"e2e-ui-{tag}"
    topic = new_topic(partitions=3, prefix="ui")
    now = time.time()
    conn = connect(mysql_params())
    redis = redis_client(redis_params())
    seed = Seed(cluster, topic, "", [slot_id_for(f"{cluster}-slot-{n}") for n in range(2)], [])

    def drop_rows() -> None:
        with conn.cursor() as cur:
            delete_cluster_rows(cur, cluster)
        conn.commit()
        conn.close()

    seed.cleanup.append(drop_rows)
    sync_registry(conn, admin_client(kafka_config), cluster, only=[topic])
    [row] = [t for t in load_topics(conn, cluster) if t.name == topic]
    seed.topic_id = row.topic_id

    store = LagStore(redis, cluster)

    def drop_keys() -> None:
        keys = [store.lag_key(topic), store.evaluated_key(topic)]
        keys += [store.latest_key(topic, 0).rpartition(":")[0], store.committed_key(topic, 0).rpartition(":")[0]]
        redis.delete(*keys)
        redis.close()

    seed.cleanup.append(drop_keys)
    # Lag rises, linker_workers go 1 -> 3, lag drains, then 3 -> 2: the demo's story in twelve minutes.
    lags = [0, 800, 2500, 5200, 7400, 6100, 4300, 2600, 1200, 500, 300, 240]
    for i, lag in enumerate(lags):  # one call per measurement, as the monitor writes them
        store.add_lag_records(
            {
                topic: LagRecord(
                    at=now - 60 * (11 - i),
                    lag=lag,
                    time_lag_s=lag / 40.0,
                    ingress_rate=12.0,
                    consumption_rate=9.0,
                )
            }
        )
    for p in range(3):
        store.add_samples({store.latest_key(topic, p): OffsetSample(now - 60, 100 + 10 * p)})
        store.add_samples({store.latest_key(topic, p): OffsetSample(now, 180 + 10 * p)})
        store.add_samples({store.committed_key(topic, p): OffsetSample(now, 100 + p)})

    for i, (old, new, at, rule, reason) in enumerate(
        [
            (1, 3, now - 60 * 7.5, "scale_up_not_draining", f"lag 7400 above max_lag, rising ({tag}); up by 2"),
            (3, 2, now - 60 * 1.5, "scale_down_low", f"lag 300 below min_lag ({tag}); down by 1"),
        ]
    ):
        d = Decision(topic, old, new, 7400 if new > old else 300, 60.0, 15.0, 0.95, "hevo", rule, reason, at)
        assert apply_change(conn, cluster=cluster, evaluation_id=f"e2e-{tag}-{i}", topic_id=row.topic_id, d=d)[0] == (
            "applied"
        )
        seed.reasons.append(reason)

    registry = SlotRegistry(redis, cluster=cluster)
    claims = ClaimStore(conn, server_lock_mode(conn))
    held: dict[str, list[Any]] = {}
    for n, (slot, wants) in enumerate(zip(seed.slots, (2, 1), strict=True)):
        registry.heartbeat(slot, datetime.now(UTC), 60)
        # The slot's process holds its lock, whose token names its worker (the page's host column).
        SlotLock(redis).acquire(slot, f"{host_of(n)}:4242:{tag}", 300)
        held[slot] = claims.claim(slot, {row.topic_id: wants}, lease_s=300).claims
        held[slot] = [claims.commit_offset(slot, c, 100 + c.partition_id) for c in held[slot]]

    def leave() -> None:
        # Gone at once, so the evaluators of the stack stop counting these slots.
        for n, slot in enumerate(seed.slots):
            claims.release(slot, held[slot])
            registry.leave(slot)
            SlotLock(redis).release(slot, f"{host_of(n)}:4242:{tag}")

    seed.cleanup.append(leave)
    return seed


def host_of(n: int) -> str:
    """The worker the seed's slot ``n`` runs on, as its lock token names it."""
    return f"lagsched-w{n + 1}@e2e"


@pytest.fixture
def seeded(airflow: AirflowAPI, kafka_config: dict[str, Any], new_topic: Callable[..., str]) -> Iterator[Seed]:
    seed = seed_cluster(kafka_config, new_topic)
    yield seed
    for f in reversed(seed.cleanup):
        f()


def get(url: str, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return int(resp.status), bytes(resp.read())
    except urllib.error.HTTPError as exc:
        return int(exc.code), bytes(exc.read())


def bearer(airflow: AirflowAPI) -> dict[str, str]:
    return {"Authorization": f"Bearer {airflow._login()}"}


@pytest.mark.parametrize("route", [*ROUTES, "/api/history?topic=x", "/static/nothing.js"])
def test_every_route_refuses_anonymous_and_bad_tokens(airflow: AirflowAPI, route: str) -> None:
    url = f"{airflow.base_url}/lagsched{route}"
    status, body = get(url)
    assert status == 401, body[:200]
    assert get(url, {"Authorization": "Bearer not-a-jwt"})[0] == 403
    assert get(url, {"Cookie": "_token=not-a-jwt"})[0] == 403


@pytest.mark.parametrize("route", ROUTES)
def test_every_route_serves_a_logged_in_user(airflow: AirflowAPI, route: str) -> None:
    status, body = get(f"{airflow.base_url}/lagsched{route}", bearer(airflow))
    assert status == 200, body[:300]
    # The UI's own session: the JWT in the _token cookie works the same.
    assert get(f"{airflow.base_url}/lagsched{route}", {"Cookie": f"_token={airflow._login()}"})[0] == 200


def test_the_plugin_is_registered_with_its_nav_entry(airflow: AirflowAPI) -> None:
    plugins = {p["name"]: p for p in airflow._request("GET", "/api/v2/plugins")["plugins"]}
    mine = plugins["lagsched"]
    assert [a["url_prefix"] for a in mine["fastapi_apps"]] == ["/lagsched"]
    [view] = mine["external_views"]
    assert (view["href"], view["url_route"], view["destination"]) == ("/lagsched/", "lagsched", "nav")


def test_status_json_holds_the_seeded_cluster(airflow: AirflowAPI, seeded: Seed) -> None:
    status, body = get(f"{airflow.base_url}/lagsched/api/status?cluster={seeded.cluster}", bearer(airflow))
    assert status == 200, body[:300]
    st = json.loads(body)
    assert seeded.cluster in st["clusters"]
    [t] = st["topics"]
    assert (t["name"], t["lag"], t["linker_workers"], t["partitions"]) == (seeded.topic, 240, 2, 3)
    assert t["owners"] == seeded.slots  # by slot number
    slots = {s["slot_id"]: s for s in st["slots"]}
    assert {s for s in seeded.slots if slots.get(s, {}).get("live")} == set(seeded.slots)
    assert [(c["partition"], c["committed_offset"]) for c in slots[seeded.slots[0]]["claims"]] == [(0, 100), (1, 101)]
    assert [slots[s]["host"] for s in seeded.slots] == [host_of(0), host_of(1)]
    assert [d["reason"] for d in st["decisions"]] == seeded.reasons[::-1]

    status, body = get(
        f"{airflow.base_url}/lagsched/api/history?cluster={seeded.cluster}&topic={seeded.topic}", bearer(airflow)
    )
    h = json.loads(body)
    assert len(h["points"]) == 12 and [s["linker_workers"] for s in h["linker_workers_steps"]] == [1, 3, 2, 2]

    status, body = get(f"{airflow.base_url}/lagsched/metrics", bearer(airflow))
    text = body.decode()
    assert f'lagsched_topic_lag_records{{cluster="{seeded.cluster}",topic="{seeded.topic}"}} 240' in text
    labels = f'cluster="{seeded.cluster}",partition="2",topic="{seeded.topic}"'
    assert f"lagsched_partition_lag_records{{{labels}}} 98" in text  # head 200, committed 102


def test_a_bad_cluster_name_is_a_400_naming_it(airflow: AirflowAPI) -> None:
    status, body = get(f"{airflow.base_url}/lagsched/api/status?cluster=no%2Fslash", bearer(airflow))
    assert status == 400 and "no/slash" in json.loads(body)["detail"]


def test_metrics_scrape_token(monkeypatch: pytest.MonkeyPatch) -> None:
    """The token path runs in-process (the stack's API server has no token set): the app as Airflow
    mounts it, with Airflow's auth manager initialised as in the API server."""
    from airflow.api_fastapi.app import init_auth_manager
    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    from lagsched.ui.app import create_app

    host = FastAPI()
    init_auth_manager(host)
    host.mount("/lagsched", create_app())
    client = TestClient(host)
    monkeypatch.setenv("LAGSCHED_METRICS_TOKEN", "s3cret-scrape-token")
    ok = client.get("/lagsched/metrics", headers={"Authorization": "Bearer s3cret-scrape-token"})
    assert ok.status_code == 200 and ok.text.startswith("# HELP lagsched_")
    assert ok.headers["content-type"].startswith("text/plain; version=0.0.4")
    assert client.get("/lagsched/metrics", headers={"Authorization": "Bearer wrong"}).status_code == 403
    assert client.get("/lagsched/metrics").status_code == 401
    # The scrape token opens the metrics only, never the page or its data.
    assert (
        client.get("/lagsched/api/status", headers={"Authorization": "Bearer s3cret-scrape-token"}).status_code == 403
    )
    # (An Airflow user's JWT on /metrics is checked against the real API server in
    # test_every_route_serves_a_logged_in_user: validating one here needs a migrated metadata DB.)
    monkeypatch.delenv("LAGSCHED_METRICS_TOKEN")
    assert client.get("/lagsched/metrics", headers={"Authorization": "Bearer s3cret-scrape-token"}).status_code == 403
    assert os.environ.get("LAGSCHED_METRICS_TOKEN") is None
