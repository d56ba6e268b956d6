# The two commands of the Quick start are `make run` and `make test`; everything else is
# for operators and developers. Service management lives in scripts/services.sh.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
HOST ?= 127.0.0.1
PORT ?= 8000
# Local development runs with DEBUG on (and its development SECRET_KEY); production sets
# DEBUG=0 and SECRET_KEY itself.
DEV_ENV := DEBUG=$${DEBUG:-1}
PYTEST_ARGS ?=
# `make test` runs the suite on this many pytest-xdist workers (the tests mostly wait on
# barriers, children and servers, so more workers than cores pays); 0 runs it serially.
# Each worker has its own test databases and Redis database (docs/testing.md).
PYTEST_WORKERS ?= 4
PYTEST_PARALLEL = $(if $(filter-out 0,$(PYTEST_WORKERS)),-n $(PYTEST_WORKERS) --dist loadgroup)
# Ports of the project-local services (scripts/services.sh reads the same variables).
HOA_PG_PORT ?= 55432
HOA_REDIS_PORT ?= 56379
export HOA_PG_PORT HOA_REDIS_PORT
export DATABASE_URL ?= postgres://hoa@127.0.0.1:$(HOA_PG_PORT)/hoa
export REDIS_URL ?= redis://127.0.0.1:$(HOA_REDIS_PORT)/0
# The benchmarks' own database, on the same project-local server.
export BENCH_DATABASE_URL ?= postgres://hoa@127.0.0.1:$(HOA_PG_PORT)/bench_hoa
# Tests use Redis database 1 (worker gwN of a parallel run: 1+N) and flush it freely; the
# demo data stays in database 0.
TEST_ENV := REDIS_URL=redis://127.0.0.1:$(HOA_REDIS_PORT)/1 LOCK_REDIS_URL=redis://127.0.0.1:$(HOA_REDIS_PORT)/1

.PHONY: help run serve test test-fast test-locking test-pgbouncer lint fmt services stop status migrate seed bench bench-quick faults clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

$(STAMP): requirements.txt requirements-dev.txt
	@scripts/bootstrap.sh venv
	@touch $(STAMP)

services: ## start the project-local PostgreSQL and Redis
	@scripts/services.sh start

stop: ## stop the project-local PostgreSQL and Redis (and a `make serve` gunicorn)
	@scripts/serve.sh stop || true
	@scripts/services.sh stop

status: ## show whether the local services are up
	@scripts/services.sh status

migrate: $(STAMP) services
	@$(DEV_ENV) $(PY) manage.py migrate --noinput

seed: migrate
	@$(DEV_ENV) $(PY) manage.py seed_demo

run: seed ## set everything up and serve on 127.0.0.1:8000 (development server)
	@$(DEV_ENV) $(PY) manage.py collectstatic --noinput -v 0
	@echo "Serving on http://$(HOST):$(PORT)/  (admin: http://$(HOST):$(PORT)/admin/ ; stop with Ctrl-C, then 'make stop')"
	@$(DEV_ENV) exec $(PY) manage.py runserver $(HOST):$(PORT)

serve: seed ## serve with gunicorn (WEB_CONCURRENCY workers; INSTANCES=N on consecutive ports)
	@$(DEV_ENV) $(PY) manage.py collectstatic --noinput -v 0
	@$(DEV_ENV) scripts/serve.sh start

test: $(STAMP) services ## run the whole test suite against real PostgreSQL and Redis
	@scripts/bootstrap.sh chromium
	@$(DEV_ENV) $(PY) manage.py makemigrations --check --dry-run >/dev/null \
		|| { echo "Model changes without migrations: run makemigrations" >&2; exit 1; }
	@$(VENV)/bin/ruff check .
	@$(TEST_ENV) scripts/run_pytest.sh $(PYTEST_PARALLEL) $(PYTEST_ARGS)

test-locking: $(STAMP) services ## locking's own tests with its own settings: nothing of the project installed
	@$(TEST_ENV) scripts/run_pytest.sh $(PYTEST_PARALLEL) --ds=locking.tests.settings locking/tests $(PYTEST_ARGS)

# The fenced-operation tests again, every connection (the children's too) going through a
# local PgBouncer in transaction-pooling mode that tests/topologies.py starts and stops.
PGBOUNCER_TESTS ?= locking/tests $(wildcard tests/test_charges_*.py tests/test_vendors_*.py)

test-pgbouncer: $(STAMP) services ## the fenced-operation tests through a local PgBouncer (transaction pooling)
	@$(TEST_ENV) $(PY) -m tests.topologies pgbouncer-pytest -m "not browser" $(PGBOUNCER_TESTS) $(PYTEST_ARGS)

lint: $(STAMP) ## ruff check and format check
	@$(VENV)/bin/ruff check .
	@$(VENV)/bin/ruff format --check .

fmt: $(STAMP) ## format the code
	@$(VENV)/bin/ruff format .
	@$(VENV)/bin/ruff check --fix .

bench: $(STAMP) services migrate ## benchmarks: prints a table, writes bench/results/*.json
	@$(PY) -m bench

bench-quick: $(STAMP) services migrate ## a short benchmark run (about 2 minutes)
	@$(PY) -m bench --quick

faults: $(STAMP) services migrate ## fault-injection and load scenarios against real processes
	@$(PY) -m tests.faults

clean: stop ## stop services and delete local data (.local) and the venv
	rm -rf .local $(VENV) staticfiles
