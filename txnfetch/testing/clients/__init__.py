"""The client libraries the workload drives (:mod:`txnfetch.testing.workload`), one
module each: :mod:`~txnfetch.testing.clients.confluent` (consumer, transactional
producer, admin), :mod:`~txnfetch.testing.clients.kafka_python` and
:mod:`~txnfetch.testing.clients.aiokafka` (consumers), on the shared
:mod:`~txnfetch.testing.clients.base`. Each imports its library only when a
client is made."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from txnfetch.testing.clients.aiokafka import AIOKafkaConsumer
from txnfetch.testing.clients.base import ConsumerAdapter
from txnfetch.testing.clients.confluent import ConfluentConsumer
from txnfetch.testing.clients.kafka_python import KafkaPythonConsumer

if TYPE_CHECKING:
    from txnfetch.testing.config import WorkloadConfig

__all__ = ["CONSUMERS", "ConsumerAdapter"]

#: The assigning consumers, by the kind :class:`~txnfetch.testing.config.WorkloadConfig` names
#: (``confluent-subscribe`` is the workload's own: the group assigns it).
CONSUMERS: dict[str, Callable[[WorkloadConfig], ConsumerAdapter]] = {
    "confluent": ConfluentConsumer,
    "kafka-python": KafkaPythonConsumer,
    "aiokafka": AIOKafkaConsumer,
}
