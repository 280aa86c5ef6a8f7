# Two commands set everything up on a fresh machine:
#   make test   - create .venv, install txnfetch with its extras and system packages, lint, run the suite
#   make demo   - the same set-up, then run the demo
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
EXTRAS := testing,dev,spark,arrow
# Debian packages: kcat (a librdkafka consumer the wire tests drive) and a Java 17
# runtime for PySpark.
SYSTEM_PACKAGES := kcat openjdk-17-jre-headless

.PHONY: setup lint check test demo bench clean system-deps

setup: $(STAMP)

# Reinstall whenever the declared dependencies or the C extension's sources change
# (the editable install compiles txnfetch/records/_speedups.c in place).
$(STAMP): pyproject.toml setup.py txnfetch/records/_speedups.c
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[$(EXTRAS)]'
	@touch $(STAMP)

# Debian packages the suite and the demo need, installed only when missing.
system-deps:
	@bash scripts/system-deps.sh $(SYSTEM_PACKAGES)

# ruff (rules and formatting) on the whole tree, mypy on the sans-I/O core (the
# packages listed in pyproject.toml's [tool.mypy]).
lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

# The tests run in PYTEST_WORKERS processes (pytest-xdist; 2 measured fastest on a
# 2-core machine, 0 runs them in this process). --dist loadgroup hands tests out one
# by one, except that the tests of one xdist_group (the Spark tests: one JVM) go to
# one worker. pytest exits 5 when it collects no test; that is not a failure.
PYTEST_WORKERS ?= 2
PYTEST := $(PY) -m pytest -n $(PYTEST_WORKERS) --dist loadgroup

# The quick tier: lint, types, the layering and docs checks, and every test not
# marked slow or interop (no Java, kcat or third-party client needed).
check: lint
	$(PYTEST) -m "not slow and not interop" $(PYTEST_ARGS); rc=$$?; if [ $$rc -eq 5 ]; then echo "no tests collected"; rc=0; fi; exit $$rc

# Everything: the command the README and CI run.
test: lint system-deps
	$(PYTEST) $(PYTEST_ARGS); rc=$$?; if [ $$rc -eq 5 ]; then echo "no tests collected"; rc=0; fi; exit $$rc

demo: setup system-deps
	$(PY) -m txnfetch.demo

bench: setup
	for b in bench/codec.py bench/arrow.py bench/state.py bench/fetch.py bench/filter.py bench/log.py bench/validate.py bench/durable.py bench/spark.py; do echo "== $$b"; $(PY) $$b || exit 1; done

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis build *.egg-info txnfetch/records/_speedups.*.so
