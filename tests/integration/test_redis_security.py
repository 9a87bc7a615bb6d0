"""A Redis Connection with an ACL user and TLS reaches a real secured redis-server (issue 17 item 5).

Debian's redis-server is started here on a free port with TLS only (a CA and server certificate
made for the test) and an ACL user; the ``default`` user is off, so only the Connection's login
and password get in. Before, `RedisParams` had no username and no TLS: such a Connection's login
and TLS extras were silently dropped and nothing connected.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Iterator
from typing import Any

import pytest

from lagsched.adapters.failures import naming_connections, redis_target
from lagsched.adapters.health import check_redis
from lagsched.adapters.redis_store import redis_client, slot_racks_key
from lagsched.adapters.slots import SlotRegistry, slot_id_for
from lagsched.connections import redis_params, where_redis
from lagsched.core.errors import ConnectionFailure, ConnectionInvalid
from secure_services import REDIS_PASSWORD, REDIS_USER, tls_acl_redis

USER, PASSWORD = REDIS_USER, REDIS_PASSWORD
CONN_ID = "secure_redis"


@pytest.fixture(scope="module")
def secure_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A TLS-only redis-server with the ACL user USER; yields the Connection (Airflow's JSON form)."""
    try:
        with tls_acl_redis(tmp_path_factory.mktemp("secure-redis")) as conn:
            yield conn
    except RuntimeError as exc:
        pytest.fail(str(exc), pytrace=False)


def use(monkeypatch: pytest.MonkeyPatch, conn: dict[str, Any]) -> None:
    monkeypatch.setenv(f"AIRFLOW_CONN_{CONN_ID.upper()}", json.dumps(conn))


def test_the_acl_user_and_tls_of_the_connection_are_used(
    secure_redis: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    use(monkeypatch, secure_redis)
    params = redis_params(CONN_ID)
    assert (params.username, params.uses_tls, params.db) == (USER, True, 3)
    where = where_redis(params)
    assert f"user {USER}" in where and "TLS" in where and PASSWORD not in where
    client = redis_client(params)
    assert client.acl_whoami() == USER
    assert client.connection_pool.connection_kwargs["ssl_ca_certs"] == secure_redis["extra"]["ssl_ca_certs"]
    # lagsched's own Redis code through it: heartbeats, the live set, a Lua script, pub/sub.
    registry = SlotRegistry(client, cluster="tls")
    now = datetime.datetime.now(datetime.UTC)
    slot = slot_id_for("slot-tls")
    registry.heartbeat(slot, now, 30)
    assert registry.live_slots(now, 30) == [slot]
    assert registry.drop_leftovers(slot_racks_key(registry.namespace)) == 0
    assert check_redis(params)["version"]


def test_a_wrong_password_fails_naming_the_connection_without_the_secret(
    secure_redis: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    use(monkeypatch, {**secure_redis, "password": "not-the-password"})
    params = redis_params(CONN_ID)
    with pytest.raises(ConnectionFailure) as failure, naming_connections(redis_target(params)):
        redis_client(params).ping()
    message = str(failure.value)
    assert CONN_ID in message and failure.value.permanent
    assert "not-the-password" not in message and PASSWORD not in message


def test_without_tls_the_server_is_not_reached(secure_redis: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """The TLS extras are what makes it work: the same Connection over plain TCP gets nowhere."""
    plain = {**secure_redis, "extra": {"db": 3}}
    use(monkeypatch, plain)
    params = redis_params(CONN_ID)
    client = redis_client(params)
    client.connection_pool.connection_kwargs["socket_timeout"] = 3
    with pytest.raises(ConnectionFailure), naming_connections(redis_target(params)):
        client.ping()


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        ({"ssl": "yes please"}, "'ssl' must be true or false"),
        ({"ssl": True, "ssl_ca_certs": "/no/such/ca.pem"}, "'/no/such/ca.pem' is not a file"),
        ({"ssl": True, "ssl_cert_reqs": "sometimes"}, "must be none, optional or required"),
        ({"ssl_ca_certs": "/etc/hostname"}, "without 'ssl': true would be ignored"),
    ],
)
def test_malformed_tls_extras_fail_naming_the_connection(
    extra: dict[str, Any], named: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    use(monkeypatch, {"conn_type": "redis", "host": "127.0.0.1", "port": 6379, "extra": extra})
    with pytest.raises(ConnectionInvalid, match=named) as bad:
        redis_params(CONN_ID)
    assert CONN_ID in str(bad.value)
