# Everything starts from Python 3.11 and a JDK on PATH: the first target that needs the
# environment creates .venv and installs the pinned set; later runs reuse it.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
# A value as one shell word, whatever it holds: a checkout path may have spaces, quotes or $(...) in it.
shq = '$(subst ','\'',$(1))'

.PHONY: install jvm-archive demo test test-thorough quick unit unit-py312 no-py312 bench chaos lint lint-py clean airflow airflow-pg browser-deps pg-deps

# The editable install's metadata is the dist-info in site-packages; setuptools also leaves an
# egg-info in include/, which the editable path puts on sys.path, so Airflow would load the
# airflow.plugins entry point twice and record the second as a plugin import error: removed.
$(STAMP): requirements.txt requirements-dev.txt requirements.lock pyproject.toml
	@command -v java >/dev/null || { echo "lakecleaner needs a JDK (17) on PATH for Spark" >&2; exit 1; }
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' || { echo "lakecleaner needs Python 3.11 (set PYTHON=...)" >&2; exit 1; }
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -r requirements.txt -r requirements-dev.txt -c requirements.lock
	$(BIN)/pip install --quiet --no-deps -e .
	rm -rf include/lakecleaner.egg-info
	touch $(STAMP)

install: $(STAMP)

# The development tools (include/lakecleaner_dev: demo, generator, table builders, throwaway PostgreSQL)
# are not part of the installed package; targets that use them put include/ on the path.
DEV := PYTHONPATH=$(call shq,$(CURDIR)/include)

demo: $(STAMP)
	$(DEV) $(BIN)/python -m lakecleaner_dev.demo

unit: $(STAMP)
	$(BIN)/python -m pytest -q tests/unit

# The contributor's quick loop: ruff and the unit tests (no Spark session, no server), well under 2 minutes.
quick: lint-py unit

# The unit tests on Python 3.12 (README "Python versions"), in a venv of their own with only what they
# need, at requirements.lock's versions (setuptools: pyspark 3.5 imports distutils). Part of `make test` (below).
# python3.12 from PATH, else pyenv's (its shim on PATH answers only where pyenv selects a 3.12).
PYTHON312 ?= $(shell for p in python3.12 "$${PYENV_ROOT:-$$HOME/.pyenv}"/versions/3.12*/bin/python3.12; do \
	"$$p" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 12))' 2>/dev/null && { command -v "$$p"; break; }; done)
VENV312   := .venv-py312
STAMP312  := $(VENV312)/.installed-stamp
UNIT_DEPS := pytest pytest-timeout hypothesis pyyaml 'pyiceberg[pyarrow,sql-sqlite]' pyspark snowpark-connect-deps-iceberg \
	croniter setuptools

$(STAMP312): requirements.lock Makefile  # Makefile: UNIT_DEPS is here
	@test -n $(call shq,$(PYTHON312)) || { echo "make unit-py312 needs Python 3.12 (python3.12 on PATH, or PYTHON312=...)" >&2; exit 1; }
	test -x $(VENV312)/bin/python || $(call shq,$(PYTHON312)) -m venv $(VENV312)
	$(VENV312)/bin/pip install --quiet --upgrade pip
	$(VENV312)/bin/pip install --quiet -c requirements.lock $(UNIT_DEPS)
	touch $(STAMP312)

unit-py312: $(STAMP312)
	$(DEV) $(VENV312)/bin/python -m pytest -q tests/unit

# `make test` runs the 3.12 unit tests where a Python 3.12 is found; without one it says so and goes on
# (the README's promise is Python 3.11 and a JDK), except in CI (CI set), where it fails.
TEST_PY312 := $(if $(strip $(PYTHON312)),unit-py312,no-py312)
no-py312:
	@if [ -n "$$CI" ]; then echo "make test in CI needs Python 3.12 for the unit tests on 3.12 (python3.12, or pyenv's)" >&2; exit 1; fi
	@echo "warning: no Python 3.12 here: the unit tests on 3.12 are skipped (make unit-py312 runs them)" >&2

# (after TEST_PY312: a rule's prerequisites are expanded where the rule is read)
# ruff and the unit tests on Python 3.12 first: a finding fails the target before the (long) tests start
# --durations: the slowest tests' times in every run's output (README "Testing" keeps the table).
# Three pytest-xdist workers on two cores (TEST_WORKERS=1 for one process): much of a test's time is a
# JVM starting, Airflow's scheduler polling or a wait, which leaves a core idle; two workers kept 1.66
# of the 2 cores busy, three 1.94 (README "Testing"). Tests that share a set-up (a module's fixtures,
# ui_lake's servers) run on one worker, built once (tests/module_scheduling.py).
TEST_WORKERS ?= 3
PYTEST_PARALLEL = $(if $(filter-out 0 1,$(TEST_WORKERS)),-n $(TEST_WORKERS) --dist loadscope --no-loadscope-reorder)
# The tests' JVM class archive (lakecleaner_dev.jvm_archive; ~35 s of one core where this machine has
# none yet, as on a fresh CI machine) is started first, in the background, and made while ruff and the
# unit tests on 3.12 run; pytest_configure finds it made, or waits for it (a lock).
PYTEST_ALL = $(BIN)/python -m pytest -q --durations=30 $(PYTEST_PARALLEL)
test: $(STAMP) jvm-archive lint-py $(TEST_PY312) browser-deps pg-deps
	$(PYTEST_ALL)

jvm-archive: $(STAMP)
	$(DEV) $(BIN)/python -m lakecleaner_dev.jvm_archive --ensure </dev/null >/dev/null 2>&1 &

# Not in CI: the same suite with 8x the Hypothesis examples (fresh ones each run, not CI's fixed
# ones) and 8x the chaos kills (tests/hypothesis_profiles.py).
test-thorough: $(STAMP) browser-deps pg-deps
	LAKECLEANER_TEST_PROFILE=thorough $(PYTEST_ALL)

# Fault test with figures: 20 cleaning runs SIGKILLed at random points while another process appends,
# on the JDBC catalog on a throwaway PostgreSQL (tests/chaos.py; a short series runs in `make test`).
chaos: $(STAMP) pg-deps
	$(DEV) $(BIN)/python tests/chaos.py --runs 20

bench: $(STAMP)
	$(DEV) $(BIN)/python benchmarks/bench_compaction.py
	$(DEV) $(BIN)/python benchmarks/bench_evaluate.py
	$(DEV) $(BIN)/python benchmarks/bench_fleet.py
	$(DEV) $(BIN)/python benchmarks/bench_cdc.py
	$(DEV) $(BIN)/python benchmarks/bench_cdc.py --series column --late-shape adversarial
	$(DEV) $(BIN)/python benchmarks/bench_erasure.py
	$(DEV) $(BIN)/python benchmarks/bench_format.py
	$(DEV) $(BIN)/python benchmarks/bench_overheads.py

# Airflow 3 on this machine: api-server, scheduler, dag-processor and triggerer (LocalExecutor, SQLite,
# SimpleAuthManager) with the lakecleaner DAG, Spark in local mode on the embedded warehouse.
AIRFLOW_HOME_DIR := $(CURDIR)/airflow_home
airflow: export AIRFLOW_HOME := $(AIRFLOW_HOME_DIR)
airflow: export AIRFLOW__CORE__DAGS_FOLDER := $(CURDIR)/dags
airflow: export AIRFLOW__LAKECLEANER__CONFIG ?= $(CURDIR)/include/lakecleaner_dev/lakecleaner.yaml
airflow: export AIRFLOW__CORE__LOAD_EXAMPLES := False
airflow: export AIRFLOW_CONN_SPARK_DEFAULT := {"conn_type":"spark","host":"local[*]"}
airflow: export SPARK_LOCAL_IP := 127.0.0.1
airflow: export PATH := $(CURDIR)/$(BIN):$(PATH)
airflow: $(STAMP)
	$(BIN)/airflow db migrate
	$(BIN)/airflow lakecleaner check
	@echo Airflow UI: http://localhost:8080, user admin, password in $(call shq,$(AIRFLOW_HOME_DIR)/simple_auth_manager_passwords.json.generated) "(written on first start)"
	$(BIN)/airflow standalone

# The same with Airflow's metadata database on a local PostgreSQL (Debian's; the cluster is kept in
# airflow_home/postgres and stopped with Airflow), so LocalExecutor really runs cleaner.threads
# applications at once. AIRFLOW_PG_PORT picks its port (default: a free one).
airflow-pg: $(STAMP) pg-deps
	$(DEV) $(BIN)/python -m lakecleaner_dev.localpg --dir $(call shq,$(AIRFLOW_HOME_DIR)/postgres) --database airflow \
		$(if $(AIRFLOW_PG_PORT),--port $(call shq,$(AIRFLOW_PG_PORT))) -- \
		$(MAKE) --no-print-directory airflow  # AIRFLOW_HOME_DIR: as given to this make (MAKEFLAGS), or the same default

lint: $(STAMP) lint-py
	$(BIN)/hadolint Dockerfile

# Python lint (ruff; rules in pyproject.toml [tool.ruff]). Fails on any finding.
lint-py: $(STAMP)
	$(BIN)/ruff check .

# Headless Chromium for tests/airflow/test_browser.py: Debian's packages (no browser download works
# here). Idempotent: installs only when missing. Needs root, as CI and these machines run.
browser-deps:
	@if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then \
		echo "chromium and chromedriver are installed"; \
	else \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver; \
	fi

# A real PostgreSQL server and its JDBC driver (Debian's), for the tests on Iceberg's JDBC catalog.
pg-deps:
	@if ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 && test -f /usr/share/java/postgresql.jar; then \
		echo "postgresql and its JDBC driver are installed"; \
	else \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql libpostgresql-jdbc-java; \
	fi

clean:
	rm -rf warehouse spark-warehouse .pytest_cache .hypothesis benchmarks/results
