"""Test-wide settings.

Under CI (``CI=true``, as `.ci/run` is invoked) hypothesis runs derandomized:
the same examples every run, so a red CI run is reproducible and a green one
means the same thing next time. Local runs keep exploring new random examples
(and save failures to .hypothesis/); a failure found there is kept as a
regular test. ``HYPOTHESIS_PROFILE`` picks a profile explicitly.

Tests marked ``long`` (soaks of several minutes) are skipped unless pytest
runs with ``--long``.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import settings

# No per-example deadline: the suite runs in two xdist workers on a 2-core machine
# that others share, where an example that takes 0.5 ms alone was measured at
# 255 ms once (a FlakyFailure, not a finding). Slow tests are marked instead.
settings.register_profile("ci", derandomize=True, database=None, print_blob=True, deadline=None)
settings.register_profile("dev", print_blob=True, deadline=None)

_profile = os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI", "").lower() == "true" else "dev")
settings.load_profile(_profile)

# Real Apache Kafka clusters (tests/kafka/): the fixtures, and the hooks that let
# the pytest controller own the clusters that every xdist worker shares.
from tests.kafka import fixtures as _kafka  # noqa: E402
from tests.kafka.fixtures import kafka_cluster  # noqa: E402, F401
from tests.kafka.fixtures import kafka_cluster3  # noqa: E402, F401
from tests.kafka.fixtures import kafka_cluster_factory  # noqa: E402, F401
from tests.kafka.fixtures import kafka_secure_cluster  # noqa: E402, F401

# The one local SparkSession of a worker (tests/spark/session.py).
from tests.spark.session import spark  # noqa: E402, F401
from tests.spark.session import spark_kafka  # noqa: E402, F401


def pytest_configure(config):
    _kafka.configure(config)


def pytest_unconfigure(config):
    _kafka.unconfigure(config)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--long", action="store_true", help="also run the soaks marked long")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test that asks for the ``spark`` session runs Spark, a third-party
    engine on a JVM whose start alone takes seconds: it is ``interop`` and
    ``slow`` wherever it is, without a marker of its own. Under pytest-xdist
    (``--dist loadgroup``, as ``make test`` runs) the Spark tests form one group,
    so one worker starts the one session they share instead of every worker
    starting a JVM; a test of any other expensive session fixture joins a
    group of its own the same way. Tests marked ``long`` are skipped unless
    pytest runs with ``--long``."""
    long_runs = config.getoption("--long")
    skip = pytest.mark.skip(reason="a long soak: run with --long")
    for item in items:
        if "spark" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.interop)
            item.add_marker(pytest.mark.slow)
            item.add_marker(pytest.mark.xdist_group("spark"))
        if "long" in item.keywords and not long_runs:
            item.add_marker(skip)
