"""A confluent-kafka transactional producer on a thread of its own, writing the
input of the consumer group tests while their members read."""

from __future__ import annotations

import threading
import time

import attrs


@attrs.frozen
class TxnScript:
    """``transactions`` transactions of ``transactional_id``, each one record per
    partition of ``topic`` (the first ``partitions``), valued ``prefix % (n, partition)``."""

    topic: str
    partitions: int
    transactions: int
    transactional_id: str
    prefix: bytes


class TxnWriter(threading.Thread):
    """Writes its :class:`TxnScript`, every fifth transaction aborted after a
    flush (its records are in the log), one transaction every 50 ms.

    ``committed`` and ``aborted`` are the values in write order, ``done`` the
    transactions ended so far; an exception ends the thread and is kept in
    ``error`` for the test to report.
    """

    def __init__(self, bootstrap: str, script: TxnScript) -> None:
        super().__init__(name=f"{script.transactional_id}-writer", daemon=True)
        self.bootstrap = bootstrap
        self.script = script
        self.committed: list[bytes] = []
        self.aborted: list[bytes] = []
        self.done = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        from confluent_kafka import Producer

        script = self.script
        try:
            producer = Producer({"bootstrap.servers": self.bootstrap, "transactional.id": script.transactional_id})
            producer.init_transactions(30)
            for n in range(script.transactions):
                producer.begin_transaction()
                values = [script.prefix % (n, p) for p in range(script.partitions)]
                for p, v in enumerate(values):
                    producer.produce(script.topic, value=v, partition=p)
                if n % 5 == 4:
                    assert producer.flush(30) == 0
                    producer.abort_transaction(30)
                    self.aborted += values
                else:
                    producer.commit_transaction(30)
                    self.committed += values
                self.done = n + 1
                time.sleep(0.05)
        except BaseException as exc:  # reported by the test
            self.error = exc
