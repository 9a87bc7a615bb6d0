"""The Spark applications lagsched runs, one file each: what ``spark-submit`` is given.

* ``consume.py``: one worker slot's run (docs/consumer.md); ``python -m lagsched.jobs.consume --help``
  lists its options.
* ``table_care.py``: compact, expire and clean one cluster's Iceberg table (docs/table-care.md).
* ``log4j2.properties``: Spark's own logging at warning level, so the job's progress lines are
  what a task log shows (`lagsched.adapters.spark.submit_command` and the operator pass it to the driver).

This folder is the repository's top-level ``jobs/``; the package reaches it as ``lagsched.jobs``
(``plugins/lagsched/jobs`` links here), so the wheel carries these same files and an installed
deployment submits them from its site-packages. Start them with
`lagsched.adapters.spark.submit_command(CONSUME_JOB, args, master=...)`, or from Airflow with
`lagsched.airflow.operators.LagschedSparkSubmitOperator(application=CONSUME_JOB)`. The lake's jars come
from ``LAGSCHED_SPARK_JARS``, never resolved at start. Importing this package imports no Spark: the DAG
files read these paths at parse time.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["CONSUME_JOB", "TABLE_CARE_JOB"]

# resolve(): in a checkout, the top-level jobs/ (what a task log shows spark-submit running).
_HERE = Path(__file__).resolve().parent

#: The consumer slot's application file.
CONSUME_JOB = str(_HERE / "consume.py")
#: The table care's application file.
TABLE_CARE_JOB = str(_HERE / "table_care.py")
