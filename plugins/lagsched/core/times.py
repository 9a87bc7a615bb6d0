"""Times as the JSON of the page, the routes and ``lagsched status`` show them."""

from __future__ import annotations

from datetime import UTC, datetime

__all__ = ["iso"]


def iso(at: float | datetime | None) -> str | None:
    """``at`` (epoch seconds or an aware datetime) as ISO 8601 in UTC, None stays None.

    >>> iso(0.0), iso(datetime(1970, 1, 1, 1, tzinfo=UTC))
    ('1970-01-01T00:00:00+00:00', '1970-01-01T01:00:00+00:00')
    """
    if at is None:
        return None
    return (at.astimezone(UTC) if isinstance(at, datetime) else datetime.fromtimestamp(at, tz=UTC)).isoformat()
