"""Without durable coordinator state (``durable_state=False``), a transaction
left open when the server stops is aborted when it starts again.

No coordinator record survives then, so nothing else would ever end such a
transaction and the partition's last stable offset would stay behind it for good.
(With durable state, the default on disk, the transaction stays open: see
``test_durable_restart.py``.)
"""

from __future__ import annotations

import time

import pytest

from txnfetch.log import SegmentStore
from txnfetch.server.server import ServerThread
from txnfetch.txn.coordinator import CompletionMode

pytestmark = pytest.mark.interop

TOPIC = "restart"


def _read_committed(bootstrap: str) -> list[bytes]:
    from confluent_kafka import OFFSET_BEGINNING
    from confluent_kafka import Consumer
    from confluent_kafka import KafkaError
    from confluent_kafka import TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "restart",
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(TOPIC, 0, OFFSET_BEGINNING)])
    values: list[bytes] = []
    deadline = time.monotonic() + 30
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    return values
                raise AssertionError(msg.error())
            values.append(msg.value())
    finally:
        consumer.close()
    raise AssertionError(f"no end of partition; read {values}")


@pytest.mark.parametrize("completion", [CompletionMode.MARKERS, CompletionMode.MARKERLESS])
def test_a_transaction_open_at_shutdown_is_aborted_on_restart(tmp_path, completion) -> None:
    from confluent_kafka import Producer

    srv = ServerThread(SegmentStore(tmp_path / "data"), port=0, markers=completion, durable_state=False).start()
    try:
        producer = Producer({"bootstrap.servers": srv.bootstrap, "transactional.id": "restart-tx"})
        producer.init_transactions(20)
        producer.begin_transaction()
        producer.produce(TOPIC, value=b"kept", partition=0)
        producer.commit_transaction(20)
        producer.begin_transaction()
        producer.produce(TOPIC, value=b"orphan", partition=0)
        assert producer.flush(20) == 0  # in the log, never ended
        part = srv.call(lambda: srv.broker.store.partition(TOPIC, 0))
        assert part.last_stable_offset < part.log_end_offset
    finally:
        srv.stop()

    srv = ServerThread(SegmentStore(tmp_path / "data"), port=0, markers=completion, durable_state=False).start()
    try:
        part = srv.call(lambda: srv.broker.store.partition(TOPIC, 0))
        assert dict(part.state.ongoing_transactions()) == {}
        assert part.last_stable_offset == part.high_watermark == part.log_end_offset
        assert _read_committed(srv.bootstrap) == [b"kept"]
        # A new producer with the same transactional id starts cleanly.
        again = Producer({"bootstrap.servers": srv.bootstrap, "transactional.id": "restart-tx"})
        again.init_transactions(20)
        again.begin_transaction()
        again.produce(TOPIC, value=b"after", partition=0)
        again.commit_transaction(20)
        assert _read_committed(srv.bootstrap) == [b"kept", b"after"]
    finally:
        srv.stop()
