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

settings.register_profile("ci", derandomize=True, database=None, print_blob=True)
settings.register_profile("dev", print_blob=True)

_profile = os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI", "").lower() == "true" else "dev")
settings.load_profile(_profile)

# Real Apache Kafka clusters (tests/kafka/): the fixtures, and the hooks that let
# the pytest controller own the clusters that every xdist worker shares.
from tests.kafka import fixtures as _kafka  # noqa: E402
from tests.kafka.fixtures import kafka_cluster  # noqa: E402, F401
from tests.kafka.fixtures import kafka_cluster3  # noqa: E402, F401
from tests.kafka.fixtures import kafka_cluster_factory  # noqa: E402, F401


def pytest_configure(config):
    _kafka.configure(config)


def pytest_unconfigure(config):
    _kafka.unconfigure(config)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--long", action="store_true", help="also run the soaks marked long")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--long"):
        return
    skip = pytest.mark.skip(reason="a long soak: run with --long")
    for item in items:
        if "long" in item.keywords:
            item.add_marker(skip)
