"""The slot operator builds its own hook (no class swap): with every argument the provider's hook takes."""

from __future__ import annotations

import inspect

import pytest
from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

from lagsched.airflow.operators import LagschedSparkSubmitHook, LagschedSparkSubmitOperator

pytestmark = pytest.mark.unit


def test_the_operator_passes_every_argument_the_providers_hook_takes() -> None:
    op = LagschedSparkSubmitOperator(task_id="consume", application="/jobs/consume.py")
    takes = set(inspect.signature(SparkSubmitHook.__init__).parameters) - {"self"}
    assert set(op.hook_arguments()) == takes


def test_the_hook_is_built_from_the_operators_settings_and_the_jobs_environment() -> None:
    op = LagschedSparkSubmitOperator(
        task_id="consume",
        application="/jobs/consume.py",
        application_args=["--slot", "s-1"],
        jars="/a.jar,/b.jar",
        conf={"spark.x": "1"},
        conn_id="my_spark",
        verbose=True,
    )
    op._lagsched_child_env = {"AIRFLOW_CONN_LAGSCHED_MYSQL": "{}", "PYTHONPATH": "/p"}
    op._lagsched_class_archive = "/cache/consume.jsa"
    hook = op._get_hook()
    assert type(hook) is LagschedSparkSubmitHook
    assert hook._lagsched_child_env == op._lagsched_child_env
    assert hook._lagsched_child_env is not op._lagsched_child_env  # the hook's own copy
    assert hook._lagsched_class_archive == "/cache/consume.jsa"
    assert hook._conn_id == "my_spark"
    assert hook._jars == "/a.jar,/b.jar"
    assert hook._conf == {"spark.x": "1"}
    assert hook._application_args == ["--slot", "s-1"]
    assert hook._verbose is True
    assert hook.scratch_dir is None
