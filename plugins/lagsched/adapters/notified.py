"""What each notifier has been told: the findings sent to it and not yet cleared, one HASH per cluster.

``lagsched:<cluster>:notified`` (`lagsched.adapters.redis_store.notified_key`), field
``<notifier>/<finding key>``, value the finding as JSON (`Finding.as_dict`), so a cleared message can
repeat what was found. Shared by every task and worker of the cluster: a finding is sent once across
runs whichever worker runs them. The key is refreshed to expire `TTL_S` after the last run that wrote
it, so a cluster that is no longer monitored leaves nothing behind.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING

from lagsched.adapters.redis_store import notified_key
from lagsched.core.findings import Finding

if TYPE_CHECKING:
    import redis

__all__ = ["TTL_S", "NotifiedStore"]

log = logging.getLogger(__name__)

TTL_S = 30 * 86_400
"""The HASH expires this long after its last write: a month without a run of the cluster."""


class NotifiedStore:
    """The sent findings of one cluster, per notifier name."""

    def __init__(self, client: redis.Redis, cluster: str) -> None:
        self.client = client
        self.cluster = cluster
        self.key = notified_key(cluster)

    @staticmethod
    def field(notifier: str, finding_key: str) -> str:
        return f"{notifier}/{finding_key}"

    def load(self) -> dict[str, dict[str, Finding]]:
        """notifier name -> finding key -> finding; an unreadable field is dropped (and deleted)."""
        out: dict[str, dict[str, Finding]] = {}
        bad: list[str] = []
        raw: Mapping[bytes | str, bytes | str] = self.client.hgetall(self.key)
        for f, v in raw.items():
            name = f.decode() if isinstance(f, bytes) else f
            notifier, sep, key = name.partition("/")
            try:
                if not sep:
                    raise ValueError("no notifier in the field")
                finding = Finding.from_dict(json.loads(v))
                if finding.key != key:
                    raise ValueError(f"field names {key!r}, value {finding.key!r}")
            except ValueError as exc:  # json's errors are ValueErrors too
                log.warning("dropping unreadable field %r of %s: %s", name, self.key, exc)
                bad.append(name)
                continue
            out.setdefault(notifier, {})[key] = finding
        if bad:
            self.client.hdel(self.key, *bad)
        return out

    def remember(self, notifier: str, finding: Finding) -> None:
        """Record that ``notifier`` was told about ``finding`` (after it was)."""
        pipe = self.client.pipeline(transaction=True)
        pipe.hset(self.key, self.field(notifier, finding.key), json.dumps(finding.as_dict(), sort_keys=True))
        pipe.expire(self.key, TTL_S)
        pipe.execute()

    def forget(self, notifier: str, finding_key: str) -> None:
        """Record that ``notifier`` was told the finding cleared (or need not be)."""
        self.client.hdel(self.key, self.field(notifier, finding_key))
