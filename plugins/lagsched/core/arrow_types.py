"""Arrow types the raw table and the typed tables share. Pure (pyarrow only, so that the modules
the DAGs import at parse time need not import it)."""

from __future__ import annotations

import pyarrow as pa

__all__ = ["HEADERS_TYPE"]

#: Kafka headers as a table's headers column holds them, in order: a list of (key, value) structs.
HEADERS_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
