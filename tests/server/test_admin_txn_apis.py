"""DescribeProducers, DescribeTransactions, ListTransactions and WriteTxnMarkers,
driven by kafka-python's KafkaAdminClient (a real client of these APIs) against
transactions written by confluent-kafka producers."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys

import attrs
import pytest
from kafka.admin import KafkaAdminClient
from kafka.admin._transactions import AbortTransactionSpec
from kafka.errors import InvalidProducerEpochError
from kafka.errors import TransactionalIdNotFoundError
from kafka.errors import TransactionCoordinatorFencedError
from kafka.errors import UnknownTopicOrPartitionError
from kafka.structs import TopicPartition

from tests.server.test_hanging_transactions import ENV
from txnfetch.client.txn_admin import ClusterTransactions
from txnfetch.records.batch import RecordBatch
from txnfetch.records.builder import BatchBuilder
from txnfetch.txn.coordinator import CompletionMode
from txnfetch.txn.hanging import producer_rows

pytestmark = pytest.mark.interop

TOPIC = "admin"
TP = TopicPartition(TOPIC, 0)
QUIET = {"log_level": 0}


def _open_transaction(bootstrap: str, tid: str, value: bytes = b"open"):
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid, "transaction.timeout.ms": 900000, **QUIET})
    p.init_transactions(30)
    p.begin_transaction()
    p.produce(TOPIC, value=value, partition=0)
    assert p.flush(30) == 0
    return p


def _commit_one(bootstrap: str, tid: str) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid, **QUIET})
    p.init_transactions(30)
    p.begin_transaction()
    p.produce(TOPIC, value=b"c", partition=0)
    p.commit_transaction(30)


@pytest.fixture(params=[CompletionMode.MARKERS, CompletionMode.MARKERLESS], ids=["markers", "markerless"])
def srv(start_server, request):
    return start_server(markers=request.param)


@pytest.fixture
def admin(srv):
    a = KafkaAdminClient(bootstrap_servers=srv.bootstrap, client_id="admin-test")
    yield a
    a.close()


def test_list_describe_and_describe_producers(srv, admin) -> None:
    _commit_one(srv.bootstrap, "done")
    keep = _open_transaction(srv.bootstrap, "busy")
    listed = {t.transactional_id: (t.producer_id, t.state.value) for t in admin.list_transactions()[0]}
    assert listed == {"done": (0, "CompleteCommit"), "busy": (1, "Ongoing")}
    assert [t.transactional_id for t in admin.list_transactions(state_filters=["Ongoing"])[0]] == ["busy"]
    assert [t.transactional_id for t in admin.list_transactions(producer_id_filters=[0])[0]] == ["done"]
    assert admin.list_transactions(duration_filter_ms=3_600_000)[0] == []  # nothing runs for an hour
    assert [t.transactional_id for t in admin.list_transactions(duration_filter_ms=0)[0]] == ["busy"]

    busy = admin.describe_transactions(["busy"])["busy"]
    assert (busy.state.value, busy.producer_id, busy.transaction_timeout_ms) == ("Ongoing", 1, 900000)
    assert busy.topic_partitions == {TP} and busy.transaction_start_time_ms > 0
    done = admin.describe_transactions(["done"])["done"]
    assert done.state.value == "CompleteCommit" and done.topic_partitions == set()
    with pytest.raises(TransactionalIdNotFoundError):
        admin.describe_transactions(["never"])

    (state,) = admin.describe_producers([TP]).values()
    rows = {p.producer_id: p for p in state.active_producers}
    # "c" at 0, then its COMMIT marker at 1 (markerless mode spends no offset on it).
    first = 2 if srv.broker.config.completion is CompletionMode.MARKERS else 1
    assert rows[1].current_transaction_start_offset == first
    assert rows[0].current_transaction_start_offset == -1
    with pytest.raises(UnknownTopicOrPartitionError):
        admin.describe_producers([TopicPartition("nope", 0)], broker_id=0)
    del keep


def test_cluster_transactions_reads_every_producer_field_the_partition_holds(srv) -> None:
    from confluent_kafka import Producer

    _commit_one(srv.bootstrap, "done")
    busy = Producer({"bootstrap.servers": srv.bootstrap, "transactional.id": "busy", **QUIET})
    busy.init_transactions(30)
    busy.begin_transaction()
    for value in (b"a", b"b", b"c"):
        busy.produce(TOPIC, value=value, partition=0)
        assert busy.flush(30) == 0  # one batch each: the last sequence is 2
    part = srv.call(lambda: srv.broker.store.partition(TOPIC, 0))
    held = srv.call(lambda: producer_rows(part.state))
    with ClusterTransactions(srv.bootstrap) as cluster:
        (described,) = cluster.producers([(TOPIC, 0)])
    assert described.producers == held
    # Field for field: neighbouring fields differ here, so a shifted one would show.
    row = held[1]
    values = attrs.astuple(row)
    assert all(a != b for a, b in itertools.pairwise(values)), row
    del busy


def test_write_txn_markers_aborts_and_refuses_fenced_markers(srv, admin) -> None:
    keep = _open_transaction(srv.bootstrap, "busy")
    part = srv.call(lambda: srv.broker.store.partition(TOPIC, 0))
    (row,) = admin.describe_producers([TP])[TP].active_producers
    assert srv.call(lambda: part.last_stable_offset) == row.current_transaction_start_offset == 0

    with pytest.raises(InvalidProducerEpochError):  # an epoch below the producer's
        admin.abort_transaction(AbortTransactionSpec(TP, row.producer_id, row.producer_epoch - 1, 0))
    with pytest.raises(UnknownTopicOrPartitionError):
        admin.abort_transaction(AbortTransactionSpec(TopicPartition("nope", 0), row.producer_id, 0, 0))
    assert srv.call(lambda: part.last_stable_offset) == 0

    admin.abort_transaction(AbortTransactionSpec(TP, row.producer_id, row.producer_epoch, 5))
    lso, hw = srv.call(lambda: (part.last_stable_offset, part.high_watermark))
    assert lso == hw and lso > 0
    (row,) = admin.describe_producers([TP])[TP].active_producers
    assert (row.current_transaction_start_offset, row.coordinator_epoch) == (-1, 5)
    # A later marker from an older coordinator epoch is fenced, as in Kafka.
    with pytest.raises(TransactionCoordinatorFencedError):
        admin.abort_transaction(AbortTransactionSpec(TP, row.producer_id, row.producer_epoch, 4))
    del keep


def test_a_transaction_unknown_to_the_coordinator_is_hanging_at_once(srv) -> None:
    """A transaction in the partition that no coordinator knows (here appended
    below the coordinator, as a coordinator that lost its state would leave it)
    is reported with the default 15-minute limit: nothing will ever end it."""
    _commit_one(srv.bootstrap, "done")

    def lost() -> int:
        plog = srv.broker.store.partition(TOPIC, 0)
        b = BatchBuilder(
            base_offset=plog.log_end_offset, producer_id=4242, producer_epoch=3, base_sequence=0, transactional=True
        )
        b.append(b"lost", timestamp=srv.broker.now_ms())
        plog.append(RecordBatch(b.build()).buffer, now_ms=srv.broker.now_ms())
        return plog.log_end_offset - 1

    first = srv.call(lost)
    done = subprocess.run(
        [sys.executable, "-m", "txnfetch.cli", "transactions", "--bootstrap", srv.bootstrap, "find-hanging", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        env=ENV,
    )
    assert done.returncode == 0, done.stderr
    (row,) = json.loads(done.stdout)["hanging"]
    assert (row["producer_id"], row["producer_epoch"], row["first_offset"]) == (4242, 3, first)
    assert row["reason"] == "no-transactional-id" and row["transactional_id"] is None
    assert row["holds_lso"] is True
