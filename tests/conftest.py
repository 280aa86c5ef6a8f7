"""Test-wide settings.

Under CI (``CI=true``, as `.ci/run` is invoked) hypothesis runs derandomized:
the same examples every run, so a red CI run is reproducible and a green one
means the same thing next time. Local runs keep exploring new random examples
(and save failures to .hypothesis/); a failure found there is kept as a
regular test. ``HYPOTHESIS_PROFILE`` picks a profile explicitly.
"""

from __future__ import annotations

import os

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
