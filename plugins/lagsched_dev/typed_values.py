"""The load generator's typed values (``--typed``): what the demo's routed topics carry.

``<prefix>orders`` carries Avro in Confluent's wire format through the schema registry (the
``lagsched_schema_registry`` Connection): writer schema v1, and from ``evolve_at_s`` on v2, which
adds an optional field (``coupon``), so the demo's typed table evolves half-way. A handful of
poison records go with them (``POISON_EVERY``, at most ``POISON_MAX``): a wrong magic byte, a schema
id the registry does not have, bytes that do not decode; they land in the dead-letter table.
``<prefix>clicks`` carries JSON Schema values through the registry. Every other topic gets the
plain JSON values it always had (the cluster's shared table).
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from typing import Any

__all__ = ["CLICK", "ORDER_V1", "ORDER_V2", "POISON_EVERY", "POISON_MAX", "TypedValues"]

ORDER_V1: dict[str, Any] = {
    "type": "record",
    "name": "Order",
    "namespace": "lagsched.demo",
    "fields": [
        {"name": "seq", "type": "long"},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "sku", "type": "string"},
        {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}},
        {"name": "status", "type": {"type": "enum", "name": "Status", "symbols": ["NEW", "PAID", "SHIPPED"]}},
        {"name": "note", "type": ["null", "string"], "default": None},
    ],
}
#: v2: an optional field added, a compatible change (the table evolves).
ORDER_V2: dict[str, Any] = {
    **ORDER_V1,
    "fields": [*ORDER_V1["fields"], {"name": "coupon", "type": ["null", "string"], "default": None}],
}
CLICK: dict[str, Any] = {
    "type": "object",
    "required": ["page", "seq"],
    "properties": {
        "seq": {"type": "integer"},
        "page": {"type": "string"},
        "at": {"type": "string", "format": "date-time"},
        "ms_on_page": {"type": ["integer", "null"]},
    },
}
#: Every this many orders one is poison, up to POISON_MAX of them.
POISON_EVERY = 997
POISON_MAX = 6
_POISON_KINDS = ("wrong magic byte", "unknown schema id", "corrupt datum")


class TypedValues:
    """Registers the demo's schemas (`register`) and encodes each topic's records (`encoder`)."""

    def __init__(self, prefix: str, *, evolve_at_s: float) -> None:
        self.prefix, self.evolve_at_s = prefix, evolve_at_s
        self.ids: dict[str, int] = {}
        self.poisoned: dict[str, int] = {}

    def register(self, registry: Any) -> dict[str, int]:
        """Register the schemas (the same ids again on a second run); the ids by name."""
        orders, clicks = f"{self.prefix}orders-value", f"{self.prefix}clicks-value"
        self.ids = {
            "order_v1": registry.register(orders, json.dumps(ORDER_V1)),
            "order_v2": registry.register(orders, json.dumps(ORDER_V2)),
            "click": registry.register(clicks, json.dumps(CLICK), "JSON"),
        }
        return self.ids

    def encoder(self, topic: str) -> Callable[[int, int, float], bytes] | None:
        """How ``topic``'s record ``seq`` made at ``ts_ms``, ``elapsed_s`` into the run, is encoded;
        None: the plain JSON of every other topic."""
        if topic == f"{self.prefix}orders":
            return self._order
        if topic == f"{self.prefix}clicks":
            return self._click
        return None

    def _order(self, seq: int, ts_ms: int, elapsed_s: float) -> bytes:
        import fastavro

        v2 = elapsed_s >= self.evolve_at_s
        schema, schema_id = (ORDER_V2, self.ids["order_v2"]) if v2 else (ORDER_V1, self.ids["order_v1"])
        record: dict[str, Any] = {
            "seq": seq, "at": ts_ms, "sku": f"SKU-{seq % 97:03d}",
            "amount": _cents(seq), "status": ("NEW", "PAID", "SHIPPED")[seq % 3],
            "note": None if seq % 5 else f"gift {seq}",
        }  # fmt: skip
        if v2:
            record["coupon"] = None if seq % 4 else f"SAVE{seq % 30}"
        out = io.BytesIO()
        fastavro.schemaless_writer(out, fastavro.parse_schema(schema), record)
        body = out.getvalue()
        count = sum(self.poisoned.values())
        if seq % POISON_EVERY == 0 and count < POISON_MAX:
            kind = _POISON_KINDS[count % len(_POISON_KINDS)]
            self.poisoned[kind] = self.poisoned.get(kind, 0) + 1
            if kind == "wrong magic byte":
                return b"\x01" + schema_id.to_bytes(4, "big") + body
            if kind == "unknown schema id":
                return b"\x00" + (max(self.ids.values()) + 1_000_000).to_bytes(4, "big") + body
            return b"\x00" + schema_id.to_bytes(4, "big") + b"\xff" * 12
        return b"\x00" + schema_id.to_bytes(4, "big") + body

    def _click(self, seq: int, ts_ms: int, elapsed_s: float) -> bytes:
        from datetime import UTC, datetime

        del elapsed_s
        at = datetime.fromtimestamp(ts_ms / 1000, tz=UTC).isoformat()
        value = {"seq": seq, "page": f"/p/{seq % 13}", "at": at, "ms_on_page": None if seq % 7 == 0 else seq % 5000}
        return b"\x00" + self.ids["click"].to_bytes(4, "big") + json.dumps(value).encode()


def _cents(seq: int) -> Any:
    from decimal import Decimal

    return Decimal(seq % 100_000) / 100
