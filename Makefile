# The two commands of the Quick start are `make run` and `make test`; everything else is
# for operators and developers. Service management lives in scripts/services.sh.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# make dist's environment of its own: build and twine (requirements-build.txt), nothing else.
BUILD_VENV := .local/build-venv
BUILD_STAMP := $(BUILD_VENV)/.installed
HOST ?= 127.0.0.1
PORT ?= 8000
# Local development runs with DEBUG on (and its development SECRET_KEY); production sets
# DEBUG=0 and SECRET_KEY itself. The links in people's emails (a reporter's opt-out) point at
# the server on $(PORT) unless SITE_URL is set.
DEV_ENV := DEBUG=$${DEBUG:-1} SITE_URL=$${SITE_URL:-http://$(HOST):$(PORT)}
# `make run`'s stand-in payment service (scripts/payment_standin.py) listens on the next port;
# the server and the stand-in share a development signing secret unless one is set.
PAYMENT_PORT ?= $(shell echo $$(($(PORT) + 1)))
DEV_PAYMENT_ENV := VENDOR_PAYMENT_URL=$${VENDOR_PAYMENT_URL:-http://$(HOST):$(PAYMENT_PORT)/payment} \
	WEBHOOK_SIGNING_SECRET=$${WEBHOOK_SIGNING_SECRET:-development-only-webhook-signing-secret}
# `make run`'s mail catcher (scripts/mail_catcher.py) takes every email on SMTP_PORT and
# shows them at http://$(HOST):$(MAIL_PORT)/; the reporters' outbox sender
# (send_reporter_emails) runs a pass every MAIL_EVERY seconds beside the server. EMAIL_URL,
# if set, sends the mail there instead.
MAIL_PORT ?= $(shell echo $$(($(PORT) + 2)))
SMTP_PORT ?= $(shell echo $$(($(PORT) + 3)))
MAIL_EVERY ?= 5
DEV_MAIL_ENV := EMAIL_URL=$${EMAIL_URL:-smtp://$(HOST):$(SMTP_PORT)}
# What `make run` starts beside the server keeps its pid files here (and the caught mail, in
# mail/); `make stop` reads them.
RUN_DIR ?= .local/run
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

.PHONY: help run stop-run serve test test-fast test-locking test-locking-matrix test-pgbouncer dist docs docs-locking docs-office check-deploy lint fmt services stop status migrate seed bench bench-quick bench-scale bench-load bench-cpu faults screenshots clean

# The targets and what they do, with this checkout's host and ports in place of $(HOST),
# $(PORT), $(HOA_PG_PORT) and $(HOA_REDIS_PORT).
help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' \
		-v host='$(HOST)' -v port='$(PORT)' -v pg='$(HOA_PG_PORT)' -v redis='$(HOA_REDIS_PORT)' \
		-v mail='$(MAIL_PORT)' \
		'{ gsub(/\$$\(HOST\)/, host, $$2); gsub(/\$$\(PORT\)/, port, $$2); \
		   gsub(/\$$\(HOA_PG_PORT\)/, pg, $$2); gsub(/\$$\(HOA_REDIS_PORT\)/, redis, $$2); \
		   gsub(/\$$\(MAIL_PORT\)/, mail, $$2); \
		   name[NR] = $$1; text[NR] = $$2; if (length($$1) > width) width = length($$1) } \
		 END { for (i = 1; i <= NR; i++) printf "  %-" width "s  %s\n", name[i], text[i] }'

$(STAMP): requirements.txt requirements-dev.txt requirements-build.txt
	@scripts/bootstrap.sh venv
	@touch $(STAMP)

services: ## start the project-local PostgreSQL (:$(HOA_PG_PORT)) and Redis (:$(HOA_REDIS_PORT))
	@scripts/services.sh start

stop: stop-run ## stop everything: `make run`, a `make serve` gunicorn, PostgreSQL and Redis
	@scripts/serve.sh stop || true
	@scripts/services.sh stop

# By the pid files of RUN_DIR, each process only if it is still the one the file names (a
# stale file's pid may be someone else's now), with its children (runserver's autoreloader
# serves from a child); then up to 10 s for them to exit (a zombie has).
RUN_PROCESSES := server:runserver mail-sender:send_reporter_emails \
	mail-catcher:mail_catcher.py payment-standin:payment_standin.py

stop-run: ## stop `make run`: the server, the payment stand-in, the mail sender and catcher
	@stopped=""; for entry in $(RUN_PROCESSES); do \
		pid_file=$(RUN_DIR)/$${entry%%:*}.pid; [ -f $$pid_file ] || continue; \
		pid=$$(cat $$pid_file); rm -f $$pid_file; \
		if ps -o args= -p "$$pid" | grep -q -- "$${entry#*:}"; then \
			pkill -TERM -P "$$pid" || true; kill "$$pid" 2>/dev/null || true; stopped="$$stopped $$pid"; \
		fi; \
	done; \
	for _ in $$(seq 50); do \
		alive=""; for pid in $$stopped; do case "$$(ps -o stat= -p $$pid)" in ""|Z*) ;; *) alive=1 ;; esac; done; \
		[ -z "$$alive" ] && break; sleep 0.2; \
	done

status: ## show whether the local services are up
	@scripts/services.sh status

migrate: $(STAMP) services ## apply the migrations to the local database
	@$(DEV_ENV) $(PY) manage.py migrate --noinput

# -v 1: seed_demo is quiet when stdout is not a terminal (cron's rule); make run prints the logins.
seed: migrate ## add what is missing of the demo data (and print the logins)
	@$(DEV_ENV) $(PY) manage.py seed_demo -v 1

# Beside the server: the payment stand-in, the mail catcher (waited for: the sender's first
# pass must find it) and the reporters' outbox sender, each in the background with its pid
# file in RUN_DIR. Ctrl-C stops the server only; `make stop` (or `make stop-run`) stops them all.
run: seed ## set everything up and serve on http://$(HOST):$(PORT)/ (development server; mail at :$(MAIL_PORT))
	@$(DEV_ENV) $(PY) manage.py collectstatic --noinput -v 0
	@mkdir -p $(RUN_DIR) && rm -f $(RUN_DIR)/mail-catcher.pid
	@$(DEV_ENV) $(DEV_PAYMENT_ENV) $(PY) scripts/payment_standin.py --host $(HOST) --port $(PAYMENT_PORT) --pid-file $(RUN_DIR)/payment-standin.pid &
	@$(PY) scripts/mail_catcher.py --host $(HOST) --port $(MAIL_PORT) --smtp-port $(SMTP_PORT) --dir $(RUN_DIR)/mail --pid-file $(RUN_DIR)/mail-catcher.pid &
	@for _ in $$(seq 100); do [ -f $(RUN_DIR)/mail-catcher.pid ] && break; sleep 0.1; done; \
		[ -f $(RUN_DIR)/mail-catcher.pid ] || { echo "The mail catcher did not start (ports $(MAIL_PORT), $(SMTP_PORT)); is a make run already running? make stop-run stops it" >&2; exit 1; }
	@$(DEV_ENV) $(DEV_MAIL_ENV) $(PY) manage.py send_reporter_emails --every $(MAIL_EVERY) -v 1 & echo $$! >$(RUN_DIR)/mail-sender.pid
	@echo "Serving on http://$(HOST):$(PORT)/  (admin: http://$(HOST):$(PORT)/admin/)"
	@echo "Emails (reporters', password resets) are caught, not sent: read them at http://$(HOST):$(MAIL_PORT)/"
	@echo "Stop it all with 'make stop' (Ctrl-C stops the server alone)"
	@echo $$$$ >$(RUN_DIR)/server.pid; $(DEV_ENV) $(DEV_PAYMENT_ENV) $(DEV_MAIL_ENV) exec $(PY) manage.py runserver $(HOST):$(PORT)

serve: seed ## serve with gunicorn on :$(PORT) (WEB_CONCURRENCY workers; INSTANCES=N on consecutive ports)
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

# The distribution of locking alone (django-fenced-writes), built as the package index
# expects: `python -m build` makes the sdist, then the wheel from that sdist (so the sdist is
# proven complete), each in an isolated environment with the pinned setuptools of
# pyproject.toml; `twine check --strict` reads both as an upload would be read, and
# scripts/check_wheel.py checks their file lists and metadata (MANIFEST.in: the sdist's).
# It runs in a virtualenv of its own (.local/build-venv: build and twine, pinned in
# requirements-build.txt; check_wheel.py needs only the standard library), not the
# development one: building a wheel of a few hundred KB must not install Django, Playwright
# and the rest first.
$(BUILD_STAMP): requirements-build.txt
	@rm -rf $(BUILD_VENV) && mkdir -p .local && $(PYTHON) -m venv $(BUILD_VENV)
	@$(BUILD_VENV)/bin/python -m pip install --quiet --disable-pip-version-check \
		-r requirements-build.txt
	@touch $@

dist: $(BUILD_STAMP) ## build the sdist and wheel of locking (django-fenced-writes) into dist/ and check them
	@rm -rf build dist django_fenced_writes.egg-info && mkdir -p .local
	@$(BUILD_VENV)/bin/python -m build --outdir dist . >.local/dist-build.log 2>&1 \
		|| { cat .local/dist-build.log >&2; exit 1; }
	@rm -rf build django_fenced_writes.egg-info
	@$(BUILD_VENV)/bin/python -m twine --no-color check --strict dist/*
	@$(BUILD_VENV)/bin/python scripts/check_wheel.py dist/django_fenced_writes-*.whl \
		dist/django_fenced_writes-*.tar.gz

# locking's documentation site: the pages of docs/locking/ (Markdown, MyST) and the API
# reference from the docstrings of locking.__all__, built by Sphinx with every warning an
# error (-W: a broken link or anchor, a docstring that does not render, a public name the
# reference leaves out) into docs/_build/locking/ (git ignores docs/_build/). Open
# docs/_build/locking/index.html. (DOCS_SRC: tests/house/test_locking_docs.py builds copies.)
DOCS_SRC ?= docs/locking
DOCS_OUT ?= docs/_build/locking
# Beside it, the product's site for office staff and operators: docs/office/ includes the
# staff guide, operations, the scheduled jobs and the design from docs/ into
# docs/_build/office/, its links into locking's pages leading to the site above.
# (OFFICE_DOCS_SRC: tests/house/test_office_docs.py builds copies.)
OFFICE_DOCS_SRC ?= docs/office
OFFICE_DOCS_OUT ?= docs/_build/office

docs: docs-locking docs-office ## build the documentation sites into docs/_build/: locking's, and the staff guide and operations (warnings are errors)

docs-locking: $(STAMP)
	@rm -rf $(DOCS_OUT)
	@$(VENV)/bin/sphinx-build -W --keep-going -q -b html $(DOCS_SRC) $(DOCS_OUT)
	@echo "locking's documentation: $(DOCS_OUT)/index.html"

docs-office: $(STAMP)
	@rm -rf $(OFFICE_DOCS_OUT)
	@$(VENV)/bin/sphinx-build -W --keep-going -q -b html $(OFFICE_DOCS_SRC) $(OFFICE_DOCS_OUT)
	@echo "staff guide and operations: $(OFFICE_DOCS_OUT)/index.html"

# locking's own tests, as the sdist carries them, against the installed wheel, in fresh
# virtualenvs under .local/matrix:
# Python 3.11 + Django 5.2 (lowest declared dependencies), 3.12 + Django 6.0, 3.13 + Django
# 6.1 (and the example project). Test databases test_locking_matrix_*; a redis-server of its
# own (make test's workers flush databases 1 + N of the worktree's).
# Then mypy --strict --disallow-any-expr on locking/tests/typing/consumer.py against the
# installed wheel (must pass) and against a copy without py.typed (must fail).
test-locking-matrix: $(STAMP) dist services ## locking's tests against the installed wheel on Python 3.11-3.13 x Django 5.2-6.1
	@$(PY) scripts/locking_matrix.py dist/django_fenced_writes-*.whl dist/django_fenced_writes-*.tar.gz

# What operators copy (deploy/): promtool on the alert rules and their tests, systemd-analyze
# verify on the units, and tests/ops/test_deploy.py (metric names, commands, timers).
check-deploy: $(STAMP) services ## check deploy/: promtool rules and tests, systemd units, their pytest
	@$(TEST_ENV) scripts/check_deploy.sh

# The fenced-operation tests again, every connection (the children's too) going through a
# local PgBouncer in transaction-pooling mode that tests/topologies.py starts and stops.
PGBOUNCER_TESTS ?= locking/tests $(wildcard tests/charges/test_charges_*.py tests/vendors/test_vendors_*.py tests/races/test_vendors_races.py)

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

# The month start at 1,000, 10,000 and 100,000 associations (58 minutes and 7.5 GB at the peak
# when last measured: it says how much before it starts). SCALES=1000,10000 runs a smaller check.
# Loads pg_stat_statements into the project-local PostgreSQL first (a restart, once).
bench-scale: $(STAMP) services ## the month start at 1,000 / 10,000 / 100,000 associations: table, chart, goals
	@scripts/services.sh enable-pg-stat-statements
	@$(PY) -m bench.scale $(if $(SCALES),--scales $(SCALES)) $(BENCH_SCALE_ARGS)

# The busiest hour: Locust's 250 staff on gunicorn, fenced and with the unfenced twins, then
# stepped up to the knee (about 2.5 hours: an hour at 250 staff and six 3-minute steps, twice).
# QUICK=1: two minutes and two one-minute steps each, to check the harness.
bench-load: $(STAMP) services migrate ## the busiest hour with Locust: p50/p95/p99 per page and action, the knee
	@$(PY) -m bench.load $(if $(QUICK),--quick) $(BENCH_LOAD_ARGS)

# The same mix in one process through Django's test client: CPU ms per request (a thread's,
# so a busy machine skews it less). BENCH_CPU_ARGS="--only complaint --profile cpu.prof".
bench-cpu: $(STAMP) services migrate ## the busiest hour's mix in one process: CPU ms per request, per page
	@$(PY) -m bench.cpu $(BENCH_CPU_ARGS)

# Then the model-based checkers (the fence at every way in; a complaint's operations; an
# invoice's money): a
# long search each, and their controls, each with a fix taken back, which must find the
# violation.
faults: $(STAMP) services migrate ## fault-injection and load scenarios against real processes
	@$(PY) -m tests.faults
	@FENCE_MODEL_FAULTS=1 $(TEST_ENV) scripts/run_pytest.sh locking/tests/test_fence_model.py tests/races/test_complaint_model.py tests/races/test_money_model.py -p no:randomly -p no:cacheprovider -q -s -rA

# The README's screenshots (docs/screenshots/), at 1280 and 390 px: the demo data seeded into
# a test database of their own, photographed in Debian's Chromium. Rerun it whenever the
# pages or the demo change; it overwrites the files.
screenshots: $(STAMP) services ## retake docs/screenshots/*.png from the demo data
	@scripts/bootstrap.sh chromium
	@$(DEV_ENV) $(TEST_ENV) TEST_DATABASE_NAME=test_hoa_screens scripts/run_pytest.sh tests/screenshots.py -p no:cacheprovider -q

clean: stop ## stop services and delete local data (.local) and the venv
	rm -rf .local $(VENV) staticfiles
