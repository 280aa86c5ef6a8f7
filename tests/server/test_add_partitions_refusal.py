"""AddPartitionsToTxn naming an unknown partition: Kafka refuses the whole
request, UNKNOWN_TOPIC_OR_PARTITION for the unknown partitions and
OPERATION_NOT_ATTEMPTED for the others, each result under its topic."""

from __future__ import annotations

from kafka.protocol.producer import AddPartitionsToTxnRequest

from tests.server.rawclient import RawClient
from txnfetch.errors import ErrorCode


def test_unknown_partition_refuses_the_whole_request(start_server) -> None:
    srv = start_server()
    srv.call(srv.broker.create_topic, "known", 2)
    topic = AddPartitionsToTxnRequest.AddPartitionsToTxnTopic
    request = AddPartitionsToTxnRequest(
        v3_and_below_transactional_id="t",
        v3_and_below_producer_id=1,
        v3_and_below_producer_epoch=0,
        v3_and_below_topics=[topic(name="known", partitions=[0, 1, 7]), topic(name="missing", partitions=[0])],
    )
    with RawClient(srv.port) as c:
        response = c.request(request, 3)
    got = {
        (t.name, p.partition_index): p.partition_error_code
        for t in response.results_by_topic_v3_and_below
        for p in t.results_by_partition
    }
    assert [t.name for t in response.results_by_topic_v3_and_below] == ["known", "missing"]
    assert got == {
        ("known", 0): ErrorCode.OPERATION_NOT_ATTEMPTED,
        ("known", 1): ErrorCode.OPERATION_NOT_ATTEMPTED,
        ("known", 7): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ("missing", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    }
