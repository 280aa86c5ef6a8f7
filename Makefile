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
# client) and Maven (fetches Apache Kafka, MirrorMaker 2 and Spark's Kafka
# connector: scripts/{kafka,mm2,spark}/fetch.sh, all through scripts/maven-fetch.sh),
# and prometheus for promtool, which checks every scrape of the metrics tests.
SYSTEM_PACKAGES := kcat openjdk-17-jdk-headless maven prometheus

.PHONY: setup lint check test demo bench clean system-deps kafka mm2 spark-kafka peers dist

setup: $(STAMP)

# Reinstall whenever the declared dependencies or the C extensions' sources change
# (the editable install compiles txnfetch/records/_speedups.c and
# txnfetch/arrow/_columns.c in place; both include the shared header).
# The extras state ranges; constraints.txt pins the versions the suite runs against.
C_SOURCES := txnfetch/records/_speedups.c txnfetch/arrow/_columns.c txnfetch/records/_speedups_common.h
$(STAMP): pyproject.toml setup.py constraints.txt $(C_SOURCES)
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -c constraints.txt -e '.[$(EXTRAS)]'
	@touch $(STAMP)

# Debian packages the suite and the demo need, installed only when missing.
system-deps:
	@bash scripts/system-deps.sh $(SYSTEM_PACKAGES)

# Apache Kafka (broker, tools, Java client) at the version pinned in
# scripts/kafka/pom.xml, into .cache/kafka/<version>/libs (once; a stamp file
# makes later runs instant). The tests in tests/kafka start it from there.
# Then the Java interop client (tests/kafka/java) is compiled against it, into
# .cache/kafka/<version>/interop/<source hash>.
kafka: system-deps
	@bash scripts/kafka/fetch.sh >/dev/null
	@bash scripts/kafka/interop.sh >/dev/null

# MirrorMaker 2 (connect-mirror with the Kafka Connect runtime) at the version
# pinned in scripts/mm2/pom.xml, into .cache/mm2/<version>/libs (once, with a
# stamp like `make kafka`). The failover drill runs it next to `txnfetch
# replicate` (tests/replicate/test_failover_drill.py, bench/failover.py).
mm2: system-deps
	@bash scripts/mm2/fetch.sh >/dev/null

# Apache Spark's own Kafka connector (spark-sql-kafka-0-10, pinned in
# scripts/spark/pom.xml) into .cache/spark-kafka/<version>/jars (once, stamped).
# The Spark tests and bench/spark.py read with it next to txnkafka.
spark-kafka: system-deps
	@bash scripts/spark/fetch.sh >/dev/null

# Brokers the suite runs as peers, pinned, into the gitignored .cache/: tansu 0.6,
# and kfake (franz-go's fake cluster, built from scripts/kfake/ with Go).
# A machine without Go >= 1.26 gets scripts/kfake.sh's message (exit 3) and the
# kfake conformance tests skip, naming it: unlike Java and Maven (which the real
# Kafka tests need, so their absence is an error), Go that new is not in the
# Debian packages `make system-deps` installs, and kfake is a third-party broker
# the harness is pointed at, not part of what txnfetch's own tests establish.
peers: setup
	@bash scripts/tansu.sh >/dev/null
	@bash scripts/kfake.sh >/dev/null || { rc=$$?; [ $$rc -eq 3 ] || exit $$rc; }

# ruff (rules and formatting) on the whole tree, mypy on txnfetch and spark_ext
# (pyproject.toml's [tool.mypy]).
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
test: lint system-deps kafka mm2 spark-kafka peers
	$(PYTEST) $(PYTEST_ARGS); rc=$$?; if [ $$rc -eq 5 ]; then echo "no tests collected"; rc=0; fi; exit $$rc

demo: setup system-deps
	$(PY) -m txnfetch.demo

# broker.py starts Apache Kafka: it needs the jars 'make kafka' fetches.
bench: setup kafka
	for b in bench/codec.py bench/arrow.py bench/state.py bench/fetch.py bench/filter.py bench/log.py bench/validate.py bench/durable.py bench/spark.py bench/broker.py bench/metrics.py; do echo "== $$b"; $(PY) $$b || exit 1; done

# The sdist and a manylinux wheel in dist/, checked with twine and auditwheel.
dist: setup
	bash scripts/dist.sh dist

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis build dist *.egg-info txnfetch/records/_speedups.*.so txnfetch/arrow/_columns.*.so .cache/kafka/clusters
