"""lagsched_scaling_evaluator: decide each topic's linker_workers, apply, record and announce."""

from lagsched.airflow.dags.scaling_evaluator import lagsched_scaling_evaluator

lagsched_scaling_evaluator()
