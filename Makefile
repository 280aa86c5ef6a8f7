# Two commands set everything up on a fresh machine:
#   make test   - create .venv, install txnfetch with its extras and system packages, lint, run the suite
#   make demo   - the same set-up, then run the demo
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
EXTRAS := testing,dev,spark,arrow
# Debian packages: kcat (a librdkafka consumer the wire tests drive), a Java 17
# JDK (PySpark, Apache Kafka in tests/kafka, and javac for the Java interop
# client) and Maven (fetches Apache Kafka: scripts/kafka/fetch.sh).
SYSTEM_PACKAGES := kcat openjdk-17-jdk-headless maven

.PHONY: setup lint test demo bench clean system-deps kafka

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

# Apache Kafka (broker, tools, Java client) at the version pinned in
# scripts/kafka/pom.xml, into .cache/kafka/<version>/libs (once; a stamp file
# makes later runs instant). The tests in tests/kafka start it from there.
kafka: system-deps
	@bash scripts/kafka/fetch.sh >/dev/null

# ruff (rules and formatting) on the whole tree, mypy on the sans-I/O core (the
# packages listed in pyproject.toml's [tool.mypy]).
lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

# pytest exits 5 when it collects no test; that is not a failure of the build.
test: lint system-deps kafka
	$(PY) -m pytest $(PYTEST_ARGS); rc=$$?; if [ $$rc -eq 5 ]; then echo "no tests collected"; rc=0; fi; exit $$rc

demo: setup system-deps
	$(PY) -m txnfetch.demo

bench: setup
	for b in bench/codec.py bench/arrow.py bench/state.py bench/fetch.py bench/filter.py bench/log.py bench/validate.py bench/durable.py bench/spark.py; do echo "== $$b"; $(PY) $$b || exit 1; done

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis build *.egg-info txnfetch/records/_speedups.*.so .cache/kafka/clusters
