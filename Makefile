# Covel server. Two commands on a fresh machine: `make run` and `make test`.
# Python 3.11+ (Django 5.2 LTS); python3.11 is preferred when present.
PYTHON ?= $(shell command -v python3.11 2>/dev/null || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
PORT ?= $(or $(SERVER_PORT),3001)
COVEL_BIND_HOST ?= 127.0.0.1
TEST_DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/covel
TEST_REDIS_URL ?= redis://127.0.0.1:6379/15
PYTEST_ARGS ?=
# Test processes per shape (pytest-xdist; 1 = no workers).
TEST_WORKERS ?= 2
XDIST = $(if $(filter 1,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadfile)

.PHONY: install run test lint-imports test-sqlite test-hosted worker beat flower migrate cluster-start cluster-stop e2e transcripts

$(VENV)/.installed: requirements.txt
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Python 3.11+ is required (found %s)" % sys.version.split()[0])'
	$(PYTHON) -m venv $(VENV)
	@echo "Installing requirements.txt into $(VENV) (the first time takes a minute or two)..."
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --progress-bar off --disable-pip-version-check -r requirements.txt
	touch $@

install: $(VENV)/.installed

migrate: install
	$(PY) manage.py migrate --noinput

run: migrate
	@echo "Covel serves http://$(COVEL_BIND_HOST):$(PORT) (API docs: /api/docs, admin: /admin/). Ctrl-C stops it."
	$(VENV)/bin/daphne -b $(COVEL_BIND_HOST) -p $(PORT) covel.asgi:application

# docs/examples/<world>.<locale>.md: 10 scripted turns per builtin world and locale, played in-process
# on a throw-away embedded database (fixed session ids, so the prose is the same on every run).
transcripts: install
	@home=$$(mktemp -d) && env -u DATABASE_URL COVEL_HOME=$$home $(PY) manage.py migrate --noinput -v0 \
		&& env -u DATABASE_URL COVEL_HOME=$$home $(PY) manage.py transcripts --out docs/examples; rc=$$?; rm -rf $$home; exit $$rc

# Celery worker for the hosted shape (DATABASE_URL and REDIS_URL must be set); each gets a unique
# node name (covel-<pid>@<host>), so several can run on one machine.
worker: install
	COVEL_DB_CONN_MAX_AGE=$${COVEL_DB_CONN_MAX_AGE:-60} $(VENV)/bin/celery -A covel worker -n covel-$$$$@%h -Q turns,jobs,media,worldgen --concurrency 4 --loglevel INFO

# Exactly one Celery beat per deployment (reapers, re-senders, retention), hosted shape only.
beat: install
	$(VENV)/bin/celery -A covel beat --schedule $${COVEL_HOME:-$$HOME/.covel}/celerybeat-schedule --loglevel INFO

# Flower, the optional task dashboard (workers, queues, tasks; a failed turn or job is a failed task):
# http://127.0.0.1:$(FLOWER_PORT). Binds loopback; set FLOWER_BASIC_AUTH=user:password before exposing it.
FLOWER_PORT ?= 5555
flower: install
	$(VENV)/bin/celery -A covel flower --port=$(FLOWER_PORT) --address=127.0.0.1

test: install
	$(MAKE) --no-print-directory lint-imports
	$(MAKE) --no-print-directory test-sqlite
	$(MAKE) --no-print-directory test-hosted

# Import contracts (.importlinter): layers, the engine as a library, no cycles.
lint-imports: install
	$(VENV)/bin/lint-imports --no-cache

test-sqlite: install
	$(VENV)/bin/pytest --ds=covel.settings.test -q $(XDIST) $(PYTEST_ARGS)

test-hosted: install
	TEST_DATABASE_URL=$(TEST_DATABASE_URL) TEST_REDIS_URL=$(TEST_REDIS_URL) \
		$(VENV)/bin/pytest --ds=covel.settings.test_hosted -q $(XDIST) $(PYTEST_ARGS)

# Local hosted-shape cluster (2 daphne + 2 Celery workers + Flower) on the local PostgreSQL/Redis.
cluster-start: install
	deploy/local-cluster.sh start

cluster-stop:
	deploy/local-cluster.sh stop

# End-to-end tests (tests/e2e/): real processes — 2 daphne + 2 Celery workers — on a fresh
# PostgreSQL database (covel_e2e_<pid>, dropped afterwards) and a free Redis database number.
# PostgreSQL (trust auth for user postgres) and Redis must be running on 127.0.0.1 (see .ci/run).
# Not collected by `make test` (tests/e2e/conftest.py) unless COVEL_E2E=1.
E2E_ARGS ?=
# In-process scenarios that start real processes (daphne servers, Celery workers) on the pytest-django
# test database: run once more in the hosted shape (TEST_DATABASE_URL / TEST_REDIS_URL, as make test).
E2E_HOSTED_FILES = tests/e2e/test_events_multiprocess.py tests/e2e/test_actions_worker.py \
	tests/e2e/test_runtime_jobs_worker.py tests/e2e/test_approvals_worker.py tests/e2e/test_provider_keys_worker.py
e2e: install
	COVEL_E2E=1 $(VENV)/bin/pytest tests/e2e -q -rA $(E2E_ARGS)
	COVEL_E2E=1 TEST_DATABASE_URL=$(TEST_DATABASE_URL) TEST_REDIS_URL=$(TEST_REDIS_URL) \
		$(VENV)/bin/pytest --ds=covel.settings.test_hosted -q -rA $(E2E_HOSTED_FILES) $(E2E_ARGS) || [ $$? -eq 5 ]
