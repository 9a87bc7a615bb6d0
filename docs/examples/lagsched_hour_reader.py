"""A downstream DAG: one run per completed hour of one lagsched table, reading exactly that hour.

Copy it into your DAGs folder and set TABLE. lagsched_hours emits one event per complete hour of
the table (docs/completeness.md); each event starts one run of this DAG, whose partition key is
the hour. The run reads the hour as of the event's snapshot, so a re-run reads the same rows.
"""

from __future__ import annotations

from typing import Any

from airflow.sdk import DAG, PartitionedAssetTimetable, get_current_context, task

from lagsched.airflow.assets import table_asset

TABLE = "lagsched.kafka.lagsched_kafka"  # catalog.namespace.table
SOURCE = table_asset(TABLE)

with DAG(
    dag_id="lagsched_hour_reader",
    schedule=PartitionedAssetTimetable(assets=SOURCE),
    catchup=False,
    tags=["lagsched", "example"],
):

    @task
    def read_hour() -> dict[str, Any]:
        from lagsched.airflow.lake import hour_filter, load_table

        context = get_current_context()
        hour = context["dag_run"].partition_key
        event = context["triggering_asset_events"][SOURCE][-1]  # the announcement of this hour
        table = load_table(TABLE)
        snapshot = event.extra["snapshot_id"]
        rows = table.scan(row_filter=hour_filter(table, hour), snapshot_id=snapshot).to_arrow()
        print(f"hour {hour}: announced {event.extra['rows']} row(s), read {rows.num_rows} (snapshot {snapshot})")
        return {
            "hour": hour,
            "read": rows.num_rows,
            "announced": event.extra["rows"],
            "restated": event.extra["restated"],
        }

    read_hour()
