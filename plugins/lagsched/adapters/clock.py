"""The machine's clock, as the `lagsched.core.times.Clock` that production code is given."""

from __future__ import annotations

import time
from datetime import UTC, datetime

from lagsched.core.times import Clock

__all__ = ["SYSTEM_CLOCK"]


def _utc_now() -> datetime:
    return datetime.now(UTC)


#: The wall clock (aware UTC) and the monotonic one of this machine.
SYSTEM_CLOCK = Clock(now=_utc_now, monotonic=time.monotonic)
