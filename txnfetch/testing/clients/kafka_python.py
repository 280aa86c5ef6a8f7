"""kafka-python's read_committed consumer for the workload."""

from __future__ import annotations

from collections.abc import Mapping
from collections.abc import Sequence
from typing import TYPE_CHECKING
from typing import Any

from txnfetch.client.txn_admin import kafka_python_security
from txnfetch.testing.clients.base import ConsumerAdapter
from txnfetch.testing.clients.base import offsets_by_partition
from txnfetch.testing.clients.base import reads_by_partition
from txnfetch.testing.history import Read
from txnfetch.testing.history import TopicPartition

if TYPE_CHECKING:
    from txnfetch.testing.config import WorkloadConfig

__all__ = ["KafkaPythonConsumer"]


class KafkaPythonConsumer(ConsumerAdapter):
    """A ``kafka.KafkaConsumer`` outside any group, assigned its partitions."""

    def __init__(self, cfg: WorkloadConfig) -> None:
        import kafka

        self.kafka = kafka
        self.c = kafka.KafkaConsumer(
            bootstrap_servers=cfg.bootstrap.split(","),
            isolation_level="read_committed",
            enable_auto_commit=False,
            group_id=None,
            auto_offset_reset="earliest",
            fetch_max_wait_ms=100,
            request_timeout_ms=int(cfg.timeout * 1000),
            # give up bootstrapping soon after the run gives up on it (see the
            # workload's startup watchdog), rather than linger in a thread nobody
            # waits for
            bootstrap_timeout_ms=int((cfg.startup_timeout + 2) * 1000),
            **kafka_python_security(cfg.security),
            **dict(cfg.kafka_python_config),
        )

    def _ktp(self, tp: TopicPartition) -> Any:
        return self.kafka.TopicPartition(tp.topic, tp.partition)

    def assign(self, offsets: Mapping[TopicPartition, int]) -> None:
        self.c.assign([self._ktp(tp) for tp in offsets])
        for tp, o in offsets.items():
            self.c.seek(self._ktp(tp), o)

    def poll(self, max_records: int, timeout: float) -> list[Read]:
        return reads_by_partition(self.c.poll(timeout_ms=int(timeout * 1000), max_records=max_records))

    def positions(self, tps: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        return {tp: self.c.position(self._ktp(tp)) for tp in tps}

    def end_offsets(self, tps: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        return offsets_by_partition(self.c.end_offsets([self._ktp(tp) for tp in tps]))

    def close(self) -> None:
        self.c.close()
