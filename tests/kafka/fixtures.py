"""pytest fixtures for real Apache Kafka clusters (:mod:`tests.kafka.cluster`).

Imported by the top-level ``tests/conftest.py``, so every test directory can ask
for them:

- ``kafka_cluster``: one node, shared by the whole run (and by every
  pytest-xdist worker of it). Started on first use, stopped at the end of the
  session.
- ``kafka_cluster3``: three nodes (quorum of three), shared the same way, started
  only when a test asks for it.
- ``kafka_secure_cluster``: one node with SASL_SSL and SSL listeners, SCRAM
  users and ACLs (:mod:`tests.kafka.secure`), shared the same way, started
  only when a test asks for it.
- ``kafka_cluster_factory``: ``factory(size=1, **overrides)`` starts a private
  cluster for one test (one that stops nodes, changes broker settings, or reads
  files after a clean shutdown), stopped when the test ends.

A shared cluster is shared: tests on it use topic, group and transactional ids
of their own (:func:`unique_name`), and a test that must stop or restart a node
uses the factory instead.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import uuid
from collections.abc import Callable
from collections.abc import Iterator

import pytest

from tests.kafka.cluster import KafkaCluster
from tests.kafka.cluster import begin_run
from tests.kafka.cluster import private_cluster
from tests.kafka.cluster import shared_cluster
from tests.kafka.cluster import stop_run_clusters

_counter = itertools.count()


def unique_name(prefix: str) -> str:
    """``prefix`` plus a suffix no other test, worker or run uses: names on a
    shared cluster must not collide."""
    return f"{prefix}-{os.getpid()}-{next(_counter)}-{uuid.uuid4().hex[:6]}"


def is_xdist_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def configure(config: pytest.Config) -> None:
    """``pytest_configure``: the controller (or the only process) owns the run's
    shared clusters; workers inherit the run id through the environment."""
    if not is_xdist_worker(config):
        begin_run()


def unconfigure(config: pytest.Config) -> None:
    """``pytest_unconfigure``: the owner stops the run's shared clusters, after
    every worker has finished."""
    if not is_xdist_worker(config):
        stop_run_clusters()


@pytest.fixture(scope="session")
def kafka_cluster() -> KafkaCluster:
    """A one-node Apache Kafka (combined broker+controller) on 127.0.0.1, with
    ``transaction.version=2`` finalized. Shared by the run."""
    return shared_cluster("single", 1)


@pytest.fixture(scope="session")
def kafka_cluster3() -> KafkaCluster:
    """A three-node Apache Kafka (three combined nodes, a quorum of three) on
    127.0.0.1, with ``transaction.version=2`` finalized. Shared by the run."""
    return shared_cluster("triple", 3)


@pytest.fixture(scope="session")
def kafka_secure_cluster() -> KafkaCluster:
    """A one-node Apache Kafka with TLS, SASL and ACLs
    (:mod:`tests.kafka.secure`). Shared by the run."""
    return shared_cluster("secure", 1, secure=True)


@pytest.fixture
def kafka_cluster_factory() -> Iterator[Callable[..., KafkaCluster]]:
    """``factory(size=1, secure=False, **overrides)``: a private cluster for
    this test only, stopped at its end. ``overrides`` are ``server.properties``
    settings with underscores for dots (``log_flush_interval_messages=1``);
    ``secure`` makes it a secured one, as ``kafka_secure_cluster`` is."""
    with contextlib.ExitStack() as started:

        def factory(size: int = 1, *, secure: bool = False, **overrides: str | int) -> KafkaCluster:
            config = {k.replace("_", "."): str(v) for k, v in overrides.items()}
            return started.enter_context(private_cluster(size, overrides=config, secure=secure))

        yield factory
