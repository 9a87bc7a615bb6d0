"""Python's cycle collector paused for a pass that makes millions of acyclic objects: a
whole-cluster pass (a measurement, a registry sync) and a slot's task reading its ranges.

Such a pass makes several objects per partition or record (offsets, samples, lags, the Admin
client's answers: about a million at 100,000 partitions; a task's Message, tuple and bytes
objects), all acyclic and freed by reference counting. The collector, run every few hundred
allocations, scans them again and again while they pile up: a third of a measurement at 10,000
partitions (0.85 s against 0.51 s, worst of 10, ``python -m lagsched_dev.bench.lag``), a third of
a task's ``consume()`` time (docs/consumer-benchmark.md).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["cyclic_gc_paused"]


@contextmanager
def cyclic_gc_paused() -> Iterator[None]:
    """The collector off for the block (or the decorated function), as it was after."""
    paused = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if paused:
            gc.enable()
