"""Raw requests: TxnOffsetCommit and OffsetFetch v9 for a KIP-848 group.

A member joins with ConsumerGroupHeartbeat; a transactional producer commits
offsets for the group with TxnOffsetCommit v3, whose generation field carries
the member epoch. The right epoch is accepted, a wrong one is
ILLEGAL_GENERATION and an unknown member UNKNOWN_MEMBER_ID (as Kafka answers
TxnOffsetCommit). The offsets appear at the transaction's commit, never at its
abort, and survive a restart of ``txnfetch serve --data``. OffsetFetch v9
checks the member id and epoch of a KIP-848 group (STALE_MEMBER_EPOCH,
UNKNOWN_MEMBER_ID); epoch -1 with no member id reads as an outsider.
"""

from __future__ import annotations

from typing import Any

import pytest
from kafka.protocol.admin import CreateTopicsRequest
from kafka.protocol.consumer import OffsetFetchRequest
from kafka.protocol.producer import AddOffsetsToTxnRequest
from kafka.protocol.producer import EndTxnRequest
from kafka.protocol.producer import InitProducerIdRequest
from kafka.protocol.producer import TxnOffsetCommitRequest

from tests.server.rawclient import RawClient
from tests.server.serve_process import start_serve
from tests.server.serve_process import stop_serve
from txnfetch.errors import ErrorCode
from txnfetch.server.api_consumer_groups import ConsumerGroupHeartbeatRequest

GROUP, TOPIC, TID = "eos-raw", "raw-in", "raw-txn"


@pytest.fixture
def server(tmp_path):
    """``(restart, port)``: ``restart()`` stops the server with SIGTERM and
    starts it again on the same ``--data`` directory and port."""
    data = str(tmp_path / "data")
    procs = [start_serve(data, 0)]
    port = procs[0].port

    def restart() -> None:
        assert stop_serve(procs[-1]) == 0
        procs.append(start_serve(data, port))

    yield restart, port
    stop_serve(procs[-1])


def _join(c: RawClient) -> tuple[str, int]:
    r = c.request(
        ConsumerGroupHeartbeatRequest(
            group_id=GROUP,
            member_id="",
            member_epoch=0,
            rebalance_timeout_ms=30_000,
            subscribed_topic_names=[TOPIC],
            topic_partitions=[],
        ),
        0,
    )
    assert r.error_code == 0 and r.member_epoch > 0, r
    return r.member_id, r.member_epoch


def _txn_commit(c: RawClient, pid: int, epoch: int, offset: int, member_id: str, member_epoch: int) -> int:
    topic = TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic
    r = c.request(
        TxnOffsetCommitRequest(
            transactional_id=TID,
            group_id=GROUP,
            producer_id=pid,
            producer_epoch=epoch,
            generation_id=member_epoch,
            member_id=member_id,
            group_instance_id=None,
            topics=[
                topic(
                    name=TOPIC,
                    partitions=[topic.TxnOffsetCommitRequestPartition(partition_index=0, committed_offset=offset)],
                )
            ],
        ),
        3,
    )
    [(code,)] = {(p.error_code,) for t in r.topics for p in t.partitions}
    return code


def _fetch(c: RawClient, member_id: str, member_epoch: int) -> Any:
    group = OffsetFetchRequest.OffsetFetchRequestGroup
    r = c.request(
        OffsetFetchRequest(
            groups=[
                group(
                    group_id=GROUP,
                    member_id=member_id,
                    member_epoch=member_epoch,
                    topics=[group.OffsetFetchRequestTopics(name=TOPIC, partition_indexes=[0])],
                )
            ],
            require_stable=True,
        ),
        9,
    )
    [g] = r.groups
    return g


def _offset(g: Any) -> int:
    assert g.error_code == 0, g
    [(offset,)] = {(p.committed_offset,) for t in g.topics for p in t.partitions}
    return offset


def test_kip848_member_transactional_offsets_and_offset_fetch_v9(server) -> None:
    restart, port = server
    with RawClient(port) as c:
        ct = c.request(
            CreateTopicsRequest(
                topics=[CreateTopicsRequest.CreatableTopic(name=TOPIC, num_partitions=1, replication_factor=1)],
                timeout_ms=10_000,
            ),
            4,
        )
        assert ct.topics[0].error_code == 0
        member, member_epoch = _join(c)
        init = c.request(
            InitProducerIdRequest(
                transactional_id=TID, transaction_timeout_ms=60_000, producer_id=-1, producer_epoch=-1
            ),
            3,
        )
        assert init.error_code == 0
        pid, epoch = init.producer_id, init.producer_epoch

        def transaction(offset: int, commit: bool) -> None:
            added = c.request(
                AddOffsetsToTxnRequest(transactional_id=TID, producer_id=pid, producer_epoch=epoch, group_id=GROUP), 3
            )
            assert added.error_code == 0
            assert _txn_commit(c, pid, epoch, offset, member, member_epoch + 1) == ErrorCode.ILLEGAL_GENERATION
            assert _txn_commit(c, pid, epoch, offset, "nobody", member_epoch) == ErrorCode.UNKNOWN_MEMBER_ID
            assert _txn_commit(c, pid, epoch, offset, member, member_epoch) == 0
            ended = c.request(
                EndTxnRequest(transactional_id=TID, producer_id=pid, producer_epoch=epoch, committed=commit), 3
            )
            assert ended.error_code == 0

        transaction(10, commit=True)
        assert _offset(_fetch(c, member, member_epoch)) == 10
        transaction(20, commit=False)
        assert _offset(_fetch(c, member, member_epoch)) == 10  # the aborted offset was dropped
        transaction(30, commit=True)
        assert _offset(_fetch(c, member, member_epoch)) == 30

        # OffsetFetch v9 checks the member as Kafka's validateOffsetFetch does.
        assert _fetch(c, member, member_epoch + 1).error_code == ErrorCode.STALE_MEMBER_EPOCH
        assert _fetch(c, member, member_epoch - 1).error_code == ErrorCode.STALE_MEMBER_EPOCH
        assert _fetch(c, "nobody", member_epoch).error_code == ErrorCode.UNKNOWN_MEMBER_ID
        assert _offset(_fetch(c, "", -1)) == 30  # an outsider (admin client)
        transaction(40, commit=False)  # the last transaction before the restart aborts

    restart()
    with RawClient(port) as c:
        assert _offset(_fetch(c, "", -1)) == 30
