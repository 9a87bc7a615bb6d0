# The two commands: `make demo` and `make test`. Everything else is a building block.
SHELL := /bin/bash
.DEFAULT_GOAL := help
VENV ?= $(CURDIR)/.venv
PY := $(VENV)/bin/python
LAGSCHED := $(VENV)/bin/lagsched
export PYTHONPATH := $(CURDIR)/plugins

.PHONY: help deps demo test lint typecheck test-unit test-integration bench stack-up stack-down stack-status

help:
	@echo "make demo          start the local stack + Airflow and run a lagsched DAG"
	@echo "make test          lint, typecheck and run every test tier against the real stack"
	@echo "make bench         run the benchmarks; JSON under bench/results/"
	@echo "make stack-up|stack-down|stack-status   manage the local Kafka/MariaDB/Redis(/Airflow)"

deps:
	@bash scripts/bootstrap.sh

lint: deps
	$(PY) -m ruff check plugins dags jobs tests

typecheck: deps
	$(PY) -m mypy

test: deps lint typecheck
	$(PY) -m pytest tests

test-unit: deps
	$(PY) -m pytest tests -m unit

test-integration: deps
	$(PY) -m pytest tests -m "not unit"

demo: deps
	@bash scripts/demo.sh

bench: deps stack-up
	$(PY) -m lagsched.bench

stack-up: deps
	$(LAGSCHED) stack up

stack-down:
	@if [ -x $(LAGSCHED) ]; then $(LAGSCHED) stack down; else echo "nothing installed, nothing running"; fi

stack-status: deps
	$(LAGSCHED) stack status
