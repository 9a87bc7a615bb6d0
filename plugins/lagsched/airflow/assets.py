"""The Airflow assets that chain lagsched's DAGs, defined once (docs/dags.md).

* `LAG_MEASURED`: the lag monitor stored a measurement; the scaling evaluator runs on it.
* `WORKERS_CHANGED`: some topic's ``linker_workers`` changed (an evaluation or an override); the
  consume DAG runs on it and starts the slots a scale-up needs.
* `SLOT_ENDED`: a consumer slot ended (its time budget, a scale-down, a second start of a running
  slot); the consume DAG runs on it and starts again whatever is still needed.
"""

from __future__ import annotations

from airflow.sdk import Asset

__all__ = ["LAG_MEASURED", "SLOT_ENDED", "WORKERS_CHANGED"]

LAG_MEASURED = Asset("lagsched://lag/measured")
WORKERS_CHANGED = Asset("lagsched://scaling/workers_changed")
SLOT_ENDED = Asset("lagsched://consume/slot_ended")
