# The two commands: `make demo` and `make test`. Everything else is a building block.
SHELL := /bin/bash
.DEFAULT_GOAL := help
VENV ?= $(CURDIR)/.venv
PY := $(VENV)/bin/python
LAGSCHED_DEV := $(VENV)/bin/lagsched-dev
export PYTHONPATH := $(CURDIR)/plugins

# `make demo DURATION=600`: seconds of traffic before the demo winds down (default: until Ctrl-C).
DURATION ?=
# `make demo CELERY=1 SPARK_CLUSTER=1`: Airflow with the CeleryExecutor and two workers, the slots on the
# stack's Spark standalone cluster (docs/celery.md). Off by default: the default demo stays light.
CELERY ?=
SPARK_CLUSTER ?=

.PHONY: help deps demo demo-down test test-fast lint typecheck test-unit test-integration bench stack-up stack-down stack-status

help:
	@echo "make demo          start the stack + Airflow, drive uneven traffic, watch lagsched scale; Ctrl-C ends it"
	@echo "                   (make demo DURATION=600: ten minutes of traffic, then the summary;"
	@echo "                   CELERY=1: Airflow on two Celery workers; SPARK_CLUSTER=1: slots on a Spark cluster)"
	@echo "make demo-down     stop the demo's load generator and the whole stack"
	@echo "make test          lint, typecheck and run every test tier against the real stack"
	@echo "make test-fast     the inner loop: lint, unit tests and DAG integrity, no services (under a minute)"
	@echo "make bench         run the benchmarks; JSON under bench/results/"
	@echo "make stack-up|stack-down|stack-status   manage the local Kafka/MariaDB/Redis(/Airflow)"

deps:
	@bash scripts/bootstrap.sh

lint: deps
	$(PY) -m ruff check plugins dags tests jobs

typecheck: deps
	$(PY) -m mypy

# Every tier against one stack, started once; TEST_WORKERS=4 runs them on xdist workers side by
# side, then the tests that restart a service alone (scripts/test.sh says why it is not the default).
test: deps lint typecheck
	@bash scripts/test.sh

# The inner loop: no service is started; `make test` still runs everything. Two workers: the tests are
# pure, so they split over the machine's two cores.
test-fast: deps lint
	$(PY) -m pytest -q -n 2 tests/unit tests/dags/test_dag_integrity.py

test-unit: deps
	$(PY) -m pytest tests -m unit

test-integration: deps
	$(PY) -m pytest tests -m "not unit"

demo: deps
	@DURATION="$(DURATION)" CELERY="$(CELERY)" SPARK_CLUSTER="$(SPARK_CLUSTER)" bash scripts/demo.sh

demo-down:
	@if [ -x $(LAGSCHED_DEV) ]; then $(LAGSCHED_DEV) demo --down; else echo "nothing installed, nothing running"; fi

bench: deps stack-up
	$(PY) -m lagsched_dev.bench

stack-up: deps
	$(LAGSCHED_DEV) stack up

stack-down:
	@if [ -x $(LAGSCHED_DEV) ]; then $(LAGSCHED_DEV) stack down; else echo "nothing installed, nothing running"; fi

stack-status: deps
	$(LAGSCHED_DEV) stack status
