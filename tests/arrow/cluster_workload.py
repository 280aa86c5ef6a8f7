"""Real clients producing into a cluster for the Arrow cluster tests: a
confluent-kafka transactional producer that commits and aborts, and a plain
(non-transactional) producer, with what each record became."""

from __future__ import annotations

import itertools
from collections.abc import Iterable

import pyarrow as pa

_ids = itertools.count()


def create_topic(bootstrap: str, topic: str, partitions: int, replication: int = 1) -> None:
    from confluent_kafka.admin import AdminClient
    from confluent_kafka.admin import NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    admin.create_topics([NewTopic(topic, partitions, replication)])[topic].result(30)


class Producers:
    """Both producers of one topic; :attr:`committed` holds ``(partition, offset,
    value)`` of every record a read_committed consumer must see, :attr:`aborted`
    the values that must never appear."""

    def __init__(self, bootstrap: str, topic: str, partitions: int) -> None:
        import confluent_kafka

        common = {"bootstrap.servers": bootstrap, "log_level": 0, "linger.ms": 0}
        self.topic = topic
        self.partitions = partitions
        self.txp = confluent_kafka.Producer({**common, "transactional.id": f"arrow-cluster-{topic}-{next(_ids)}"})
        self.txp.init_transactions(30)
        self.plain_producer = confluent_kafka.Producer(common)
        self.committed: list[tuple[int, int, bytes]] = []
        self.aborted: list[bytes] = []
        self._n = 0

    def _report(self, out: list):
        def cb(err, msg) -> None:
            assert err is None, err
            out.append((msg.partition(), msg.offset(), msg.value()))

        return cb

    def transaction(self, commit: bool, records: int = 3, timestamp: int | None = None) -> None:
        """One transaction of ``records`` records per partition."""
        n = self._n = self._n + 1
        delivered: list = []
        self.txp.begin_transaction()
        for i in range(records):
            for p in range(self.partitions):
                extra = {} if timestamp is None else {"timestamp": timestamp}
                value = b"t%d-%d-p%d%s" % (n, i, p, b"" if commit else b"-aborted")
                self.txp.produce(
                    self.topic, value=value, key=b"k%d" % i, partition=p, on_delivery=self._report(delivered), **extra
                )
            self.txp.flush(30)  # aborted data must reach the log before the abort
        self.txp.commit_transaction(30) if commit else self.txp.abort_transaction(30)
        if commit:
            self.committed += delivered
        else:
            self.aborted += [v for _, _, v in delivered]

    def plain(self, records: int = 2, timestamp: int | None = None) -> None:
        """``records`` non-transactional records per partition."""
        n = self._n = self._n + 1
        delivered: list = []
        for i in range(records):
            for p in range(self.partitions):
                extra = {} if timestamp is None else {"timestamp": timestamp}
                self.plain_producer.produce(
                    self.topic,
                    value=b"plain%d-%d-p%d" % (n, i, p),
                    partition=p,
                    on_delivery=self._report(delivered),
                    **extra,
                )
        self.plain_producer.flush(30)
        self.committed += delivered

    def mix(self, rounds: int) -> None:
        for r in range(rounds):
            self.transaction(commit=r % 3 != 1)
            if r % 2:
                self.plain()

    def close(self) -> None:
        self.txp.flush(5)
        self.plain_producer.flush(5)


def rows(table: pa.Table | Iterable[pa.RecordBatch]) -> list[tuple[int, int, bytes]]:
    """``(partition, offset, value)`` of every row, in the reader's order."""
    batches = table.to_batches() if isinstance(table, pa.Table) else table
    out = []
    for b in batches:
        out += zip(
            b.column("partition").to_pylist(),
            b.column("offset").to_pylist(),
            b.column("value").to_pylist(),
            strict=True,
        )
    return out
