# riverbed: the two commands that matter are `make run` and `make test`.
# Everything they need is installed here, on a fresh machine, from PyPI and Debian.
SHELL := /bin/bash
PYTHON ?= python3.11
export UV_PYTHON_DOWNLOADS := never
UV := $(shell command -v uv 2>/dev/null || echo $(HOME)/.local/bin/uv)
VENV := .venv
STAMP := $(VENV)/.installed
PYTEST_ARGS ?=
# `make test` runs pytest twice; both must pass.
# 1. The in-process tests (IN_PROCESS_TESTS: cores, property tests, seeded simulations; no
#    broker, JVM or server process) are CPU-bound: UNIT_WORKERS pytest-xdist workers, one a
#    core, run them in about half the time (a test takes ports from free_port or port 0,
#    never a fixed one: pass riverbed.http.listeners= to a Node, whose default is 9644).
# 2. Everything else (tests/integration, tests/spark, tests/spark_cluster, and any new
#    directory) starts real processes: 3-node clusters, Spark's JVM. Those tests mostly
#    wait, so PYTEST_WORKERS=2 pytest-xdist workers run them in ~11 min instead of ~19.
#    Three of the first four such runs found a test that a loaded machine breaks; with the
#    three fixed, the next six runs on fresh clones were clean (RESULTS.md, stops 44-45).
#    PYTEST_WORKERS=0 runs them in one process, as before. Each worker takes ports from its
#    own slice (riverbed.testing.ports),
#    a file stays whole on one worker, in order (module-scoped clusters;
#    tests/unit/test_xdist_groups.py), and the Spark tests share one (tests/conftest.py).
# PYTEST_ARGS goes to both runs (-x, -k, --lf, -v); when it names test paths (tests/...),
# `make test` runs just those, in one run, as phase 2 does.
IN_PROCESS_TESTS := tests/unit tests/simulation
UNIT_WORKERS ?= 2
PYTEST_WORKERS ?= 2
# The C extensions (the Spark source's record decoder, the metadata records' fast path,
# a TLS listener's record reader),
# built in place for the editable install (hatch_build.py; wheels get them from the same
# file through hatchling's build hook). COLUMNAR stands for all of them.
EXT_SUFFIX := $(shell $(PYTHON) -c "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))" 2>/dev/null)
COLUMNAR := src/riverbed/spark/_columnar$(EXT_SUFFIX) src/riverbed/protocol/_fastpath$(EXT_SUFFIX) \
	src/riverbed/server/_tlsread$(EXT_SUFFIX)

.PHONY: run test bytecode lint typecheck unit sysdeps venv bench soak chaos soak-spark fuzz clean ext vendor wheel

$(UV):
	@command -v uv >/dev/null 2>&1 || $(PYTHON) -m pip install --quiet --user uv || $(PYTHON) -m pip install --quiet uv

# Byte code is written ahead (as pip does on install; uv does not unless asked): under
# PYTHONDONTWRITEBYTECODE=1, which these machines set, every Python process would compile
# each module it imports from source again. A node's start took 2.2-2.6 s, 1.6 s of it in
# compile(); with the byte code 1.1-1.3 s. `bytecode` does the same for our own sources
# (incremental: only what changed is compiled again).
$(STAMP): pyproject.toml uv.lock | $(UV)
	$(UV) sync --frozen --all-extras --compile-bytecode --python $(PYTHON)
	@touch $(STAMP)

bytecode: $(STAMP)
	@$(VENV)/bin/python -m compileall -q -j 0 src/riverbed

venv: $(STAMP) $(COLUMNAR)

$(COLUMNAR) &: src/riverbed/spark/_columnar.c src/riverbed/protocol/_fastpath.c \
		src/riverbed/server/_tlsread.c hatch_build.py | $(STAMP)
	$(VENV)/bin/python hatch_build.py

ext: $(COLUMNAR)

# A wheel of riverbed (with the compiled record decoder) in dist/: the way to put the Spark
# data source on a cluster's executors (pip install it into the Python that
# spark.pyspark.python names on every worker; see the README, "Spark on a cluster").
wheel: | $(UV)
	$(UV) build --wheel --out-dir dist

# Debian packages the tests use; installed when missing, with a clear word when that is impossible.
sysdeps:
	@if ! command -v kcat >/dev/null 2>&1; then \
	  echo "installing Debian package kcat (used by integration tests)"; \
	  if [ "$$(id -u)" = 0 ]; then (apt-get update -qq && apt-get install -y -qq kcat >/dev/null) || echo "WARNING: could not install kcat with apt-get; kcat tests will fail"; \
	  elif command -v sudo >/dev/null 2>&1; then (sudo apt-get update -qq && sudo apt-get install -y -qq kcat >/dev/null) || echo "WARNING: could not install kcat"; \
	  else echo "WARNING: kcat is missing and this user cannot run apt-get; install it: apt-get install kcat"; fi; \
	fi
	@if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then \
	  echo "installing Debian packages chromium and chromium-driver (the console's browser tests)"; \
	  if [ "$$(id -u)" = 0 ]; then (apt-get update -qq && apt-get install -y -qq chromium chromium-driver >/dev/null) || echo "WARNING: could not install chromium; console browser tests will fail"; \
	  elif command -v sudo >/dev/null 2>&1; then (sudo apt-get update -qq && sudo apt-get install -y -qq chromium chromium-driver >/dev/null) || echo "WARNING: could not install chromium"; \
	  else echo "WARNING: chromium is missing and this user cannot run apt-get; install it: apt-get install chromium chromium-driver"; fi; \
	fi
	@if ! command -v openssl >/dev/null 2>&1; then \
	  echo "installing Debian package openssl (a TLS test renegotiates with openssl s_client)"; \
	  ( [ "$$(id -u)" = 0 ] && apt-get update -qq && apt-get install -y -qq openssl >/dev/null ) || echo "WARNING: openssl missing: install it (apt-get install openssl)"; \
	fi
	@if ! command -v java >/dev/null 2>&1; then \
	  echo "Java 17+ is needed by Spark; installing openjdk-17-jre-headless"; \
	  ( [ "$$(id -u)" = 0 ] && apt-get update -qq && apt-get install -y -qq openjdk-17-jre-headless >/dev/null ) || echo "WARNING: Java 17+ missing: install openjdk-17-jre-headless"; \
	fi
	@v=$$(java -version 2>&1 | sed -n 's/.*version "\(1\.\)\{0,1\}\([0-9]*\).*/\2/p' | head -n 1); \
	if [ -n "$$v" ] && [ "$$v" -lt 17 ]; then \
	  echo "WARNING: Spark needs Java 17+ but java -version reports $$v; tests/spark will fail: install openjdk-17-jre-headless and put it first on PATH (or set JAVA_HOME)"; \
	fi

run: $(STAMP) $(COLUMNAR) bytecode
	@echo "riverbed: starting the embedded broker (data in ./riverbed-data); Ctrl-C stops it."
	@echo "connect with bootstrap.servers=localhost:9092, e.g.:"
	@echo "  $(VENV)/bin/riverbed topics list --bootstrap-server localhost:9092"
	@echo "  kcat -b localhost:9092 -L"
	exec $(VENV)/bin/riverbed server start

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks scripts examples
	$(VENV)/bin/ruff format --check src tests benchmarks scripts examples

typecheck: $(STAMP)
	$(VENV)/bin/mypy

test: $(STAMP) $(COLUMNAR) bytecode sysdeps lint typecheck
ifeq ($(filter tests%,$(PYTEST_ARGS)),)
	$(VENV)/bin/pytest -q -n $(UNIT_WORKERS) --dist load $(IN_PROCESS_TESTS) $(PYTEST_ARGS)
	$(VENV)/bin/pytest -q -n $(PYTEST_WORKERS) --dist loadgroup \
	  $(addprefix --ignore=,$(IN_PROCESS_TESTS)) $(PYTEST_ARGS)
else
	$(VENV)/bin/pytest -q -n $(PYTEST_WORKERS) --dist loadgroup $(PYTEST_ARGS)
endif

unit: $(STAMP) $(COLUMNAR)
	$(VENV)/bin/pytest -q tests/unit $(PYTEST_ARGS)

# The property tests with random seeds and more examples (make test derandomizes them so a
# clean clone runs the examples its author ran); each failure prints its reproduce blob.
fuzz: $(STAMP) $(COLUMNAR)
	HYPOTHESIS_PROFILE=fuzz $(VENV)/bin/pytest -q -n $(UNIT_WORKERS) --dist load $(IN_PROCESS_TESTS) $(PYTEST_ARGS)

bench: $(STAMP) $(COLUMNAR)
	$(VENV)/bin/python -m benchmarks.codec_bench

# simulation soak, raft, replication, then replication over the brokers' shells (real
# storage on a simulated disk), then the group coordinator at its persistence seam, then
# the producer ledger's model check, then transactions (coordinator + partition leaders),
# then the controller's broker liveness (the early fence):
# `make soak SEEDS=100000` (each failure prints its replay command); FIRST_SEED=K starts at
# seed K, so a soak can try seeds the last one did not
SEEDS ?= 10000
FIRST_SEED ?= 0
SOAK_SEEDS = --seeds $(SEEDS) --first-seed $(FIRST_SEED)
soak: $(STAMP)
	$(VENV)/bin/python -m riverbed.testing.raft_sim $(SOAK_SEEDS)
	$(VENV)/bin/python -m riverbed.testing.replication_sim $(SOAK_SEEDS)
	$(VENV)/bin/python -m riverbed.testing.replication_shell_sim $(SOAK_SEEDS)
	$(VENV)/bin/python -m riverbed.testing.group_sim $(SOAK_SEEDS)
	$(VENV)/bin/python -m riverbed.testing.ledger_model $(SOAK_SEEDS)
	$(VENV)/bin/python -m riverbed.testing.txn_sim $(SOAK_SEEDS)
	$(VENV)/bin/python -m riverbed.testing.liveness_sim $(SOAK_SEEDS)

# Process faults on a real 3-node cluster under an idempotent producer, then every
# acknowledged record checked in the log (riverbed.testing.nemesis, Jepsen's method):
# `make chaos CHAOS_RUNS=10 CHAOS_S=120` (seeded schedules from FIRST_SEED; each failing
# run prints its replay command). make test runs one short fixed schedule.
CHAOS_RUNS ?= 3
CHAOS_S ?= 90
chaos: $(STAMP)
	$(VENV)/bin/python -m riverbed.testing.nemesis --runs $(CHAOS_RUNS) --seconds $(CHAOS_S) --first-seed $(FIRST_SEED)

# The Spark exactly-once sink under repeated driver kills on 3 nodes (issue 22): a soak,
# each kill restarts a Spark driver; RIVERBED_EOS_KILLS (default 10) kills per run.
soak-spark: $(STAMP) $(COLUMNAR)
	$(VENV)/bin/pytest -q -s tests/spark/soak_exactly_once_kills.py

# The console's JavaScript and CSS, vendored into the package with their licences (committed:
# nothing is fetched at build or run time). `make vendor` refreshes them from npm.
HTMX_VERSION ?= 2.0.4
UPLOT_VERSION ?= 1.6.32
CONSOLE_VENDOR := src/riverbed/console/static/vendor
vendor:
	@d=$$(mktemp -d) && cd $$d && npm pack --silent htmx.org@$(HTMX_VERSION) uplot@$(UPLOT_VERSION) >/dev/null && \
	  mkdir h u && tar xzf htmx.org-$(HTMX_VERSION).tgz -C h && tar xzf uplot-$(UPLOT_VERSION).tgz -C u && \
	  cd $(CURDIR) && cp $$d/h/package/dist/htmx.min.js $(CONSOLE_VENDOR)/htmx.min.js && \
	  cp $$d/h/package/LICENSE $(CONSOLE_VENDOR)/htmx.LICENSE && \
	  cp $$d/u/package/dist/uPlot.iife.min.js $$d/u/package/dist/uPlot.min.css $(CONSOLE_VENDOR)/ && \
	  cp $$d/u/package/LICENSE $(CONSOLE_VENDOR)/uPlot.LICENSE && rm -rf $$d && \
	  echo "vendored htmx $(HTMX_VERSION) and uPlot $(UPLOT_VERSION) into $(CONSOLE_VENDOR)"

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
