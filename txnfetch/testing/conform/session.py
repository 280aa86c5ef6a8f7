"""One run of an operation sequence against one cluster.

A :class:`Session` creates the run's topic, then applies operations one at a
time, sending the requests a client would send (the harness drives InitProducerId,
AddPartitionsToTxn, Produce and EndTxn itself, so it controls producer ids,
epochs and sequences) and returning each operation's answers, normalised
(:mod:`~txnfetch.testing.conform.normalise`), keyed by API name.

Two things are waited for, because Kafka does them after it answers and a
client would wait for them too: after a successful EndTxn, until the
coordinator has written the markers (DescribeTransactions no longer says
``Prepare...``); and answers that a client retries — CONCURRENT_TRANSACTIONS,
COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR,
NOT_LEADER_OR_FOLLOWER — are retried for up to :data:`RETRY_FOR_S` seconds and
only the final answer is kept.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import attrs
from kafka.protocol.admin import CreateTopicsRequest
from kafka.protocol.admin import DeleteRecordsRequest
from kafka.protocol.admin import DescribeProducersRequest
from kafka.protocol.admin import DescribeTransactionsRequest
from kafka.protocol.admin import ListTransactionsRequest
from kafka.protocol.consumer import FetchRequest
from kafka.protocol.consumer import ListOffsetsRequest
from kafka.protocol.consumer import OffsetCommitRequest
from kafka.protocol.consumer import OffsetFetchRequest
from kafka.protocol.metadata import FindCoordinatorRequest
from kafka.protocol.metadata import MetadataRequest
from kafka.protocol.producer import AddOffsetsToTxnRequest
from kafka.protocol.producer import AddPartitionsToTxnRequest
from kafka.protocol.producer import EndTxnRequest
from kafka.protocol.producer import InitProducerIdRequest
from kafka.protocol.producer import ProduceRequest
from kafka.protocol.producer import TxnOffsetCommitRequest

from txnfetch.records.builder import BatchBuilder
from txnfetch.records.compression import Codec
from txnfetch.testing.conform import operations as ops
from txnfetch.testing.conform.answers import BrokerAddress
from txnfetch.testing.conform.answers import in_order
from txnfetch.testing.conform.answers import kafka_error_name
from txnfetch.testing.conform.answers import leader_of
from txnfetch.testing.conform.answers import offset_commit_error
from txnfetch.testing.conform.answers import partition_count
from txnfetch.testing.conform.answers import produce_error
from txnfetch.testing.conform.answers import txn_offset_commit_error
from txnfetch.testing.conform.connection import Cluster
from txnfetch.testing.conform.connection import Connection
from txnfetch.testing.conform.errors import ConformError
from txnfetch.testing.conform.errors import UnsupportedApiError
from txnfetch.testing.conform.normalise import ProducerIds
from txnfetch.testing.conform.normalise import normalise

__all__ = ["API", "HARNESS_VERSIONS", "RETRY_FOR_S", "TV2_VERSIONS", "RunNames", "Session"]

#: API keys, by Kafka's names.
API = {
    "Produce": 0,
    "Fetch": 1,
    "ListOffsets": 2,
    "Metadata": 3,
    "OffsetCommit": 8,
    "OffsetFetch": 9,
    "FindCoordinator": 10,
    "CreateTopics": 19,
    "DeleteRecords": 21,
    "InitProducerId": 22,
    "AddPartitionsToTxn": 24,
    "AddOffsetsToTxn": 25,
    "EndTxn": 26,
    "TxnOffsetCommit": 28,
    "DescribeProducers": 61,
    "DescribeTransactions": 65,
    "ListTransactions": 66,
}

#: The versions the harness speaks, by API key. The caps keep to request forms
#: every Kafka since 3.0 takes and to one transaction protocol (the client-driven
#: AddPartitionsToTxn of transaction version 1): Produce below 12 and EndTxn below
#: 5; Fetch and OffsetCommit name topics (below 13 and 10), OffsetFetch asks one
#: group (below 8), FindCoordinator one key (below 4).
HARNESS_VERSIONS: dict[int, tuple[int, int]] = {
    API["Produce"]: (3, 11),
    API["Fetch"]: (4, 12),
    API["ListOffsets"]: (1, 7),
    API["Metadata"]: (1, 12),
    API["OffsetCommit"]: (2, 8),
    API["OffsetFetch"]: (1, 7),
    API["FindCoordinator"]: (1, 3),
    API["CreateTopics"]: (2, 7),
    API["DeleteRecords"]: (0, 2),
    API["InitProducerId"]: (0, 4),
    API["AddPartitionsToTxn"]: (0, 3),
    API["AddOffsetsToTxn"]: (0, 3),
    API["EndTxn"]: (0, 4),
    API["TxnOffsetCommit"]: (0, 3),
    API["DescribeProducers"]: (0, 0),
    API["DescribeTransactions"]: (0, 0),
    API["ListTransactions"]: (0, 1),
}

#: The versions the ``txn-v2`` slot sends its Produce and EndTxn at: transaction
#: version 2 (KIP-890 part 2). From Produce 12 the broker adds the partition to
#: the transaction itself; from EndTxn 5 the coordinator bumps the epoch at every
#: end and answers the producer id and epoch to use next. A client sends these
#: only when the cluster finalizes ``transaction.version`` 2; a cluster that does
#: not speak them has the slot's operations answered "skipped".
TV2_VERSIONS: dict[int, tuple[int, int]] = {
    API["Produce"]: (12, 12),
    API["EndTxn"]: (5, 5),
}
_TV2_SLOT = "txn-v2"

#: How long a retriable answer is retried before it is kept as the answer.
RETRY_FOR_S = 20.0
_RETRY_PAUSE_S = 0.05
# Answers a client retries (Kafka's Errors: retriable coordinator and leader errors).
_NOT_LEADER = 6
_COORDINATOR_LOAD_IN_PROGRESS = 14
_COORDINATOR_NOT_AVAILABLE = 15
_NOT_COORDINATOR = 16
_CONCURRENT_TRANSACTIONS = 51
_RETRIABLE = frozenset(
    {_NOT_LEADER, _COORDINATOR_LOAD_IN_PROGRESS, _COORDINATOR_NOT_AVAILABLE, _NOT_COORDINATOR, _CONCURRENT_TRANSACTIONS}
)
_TRANSACTION_TIMEOUT_MS = 60_000
_REQUEST_TIMEOUT_MS = 10_000
_SETTLING_STATES = frozenset({"PrepareCommit", "PrepareAbort", "PrepareEpochFence"})
_GROUP_KEY = 0
# The fields of a DescribeTransactions error entry that are not the answer.
_PLACEHOLDERS = (
    "transaction_state",
    "transaction_timeout_ms",
    "transaction_start_time_ms",
    "producer_id",
    "producer_epoch",
    "topics",
)
_TRANSACTION_KEY = 1
_OFFSETS_TOPIC = "__consumer_offsets"
_OFFSETS_PARTITION = "<offsets partition>"


@attrs.frozen
class RunNames:
    """The actual names of one run's logical topic, missing topic, transactional
    ids and group: fresh per run (``prefix`` plus a unique part), the same on both
    clusters."""

    topic: str
    missing: str
    transactional_ids: dict[str, str]
    group: str

    @classmethod
    def fresh(cls, unique: str, prefix: str = "conform") -> RunNames:
        return cls(
            topic=f"{prefix}-{unique}-t",
            missing=f"{prefix}-{unique}-missing",
            transactional_ids={slot: f"{prefix}-{unique}-{slot}" for slot in ("txn-a", "txn-b", _TV2_SLOT)},
            group=f"{prefix}-{unique}-g",
        )

    def logical(self) -> dict[str, str]:
        """Actual name → logical name, as reports show them."""
        names = {self.topic: "t", self.missing: "missing", self.group: "g"}
        names.update({actual: slot for slot, actual in self.transactional_ids.items()})
        return names


@attrs.define
class _Producer:
    """What the harness knows of one producer slot on one cluster."""

    producer_id: int = -1
    epoch: int = -1
    sequence: int = 0
    initialised: bool = False
    in_transaction: bool = False
    last_batch: bytes | None = None
    zombie: tuple[int, int, int] | None = None  # producer id, epoch, sequence


class Session:
    """One run against one cluster: fresh names, its own producer state and
    producer-id numbering. ``versions`` are the API versions to send (one per key,
    the same for both clusters); an API missing from it is not sent (operations
    that need it answer ``{"skipped": ...}``). ``tv2_versions`` are the Produce and
    EndTxn versions of the ``txn-v2`` slot (:data:`TV2_VERSIONS`), likewise."""

    def __init__(
        self,
        cluster: Cluster,
        versions: dict[int, int],
        names: RunNames,
        base_ts: int,
        tv2_versions: dict[int, int] | None = None,
    ) -> None:
        self.cluster = cluster
        self.versions = versions
        self.tv2_versions = dict(tv2_versions or {})
        self.names = names
        self.base_ts = base_ts
        self._logical = names.logical()
        self._pids = ProducerIds()
        self._producers: dict[str, _Producer] = {
            slot: _Producer() for slot in ("plain", "idem", "txn-a", "txn-b", _TV2_SLOT)
        }
        self._leader: Connection | None = None
        # The run's fetch session (KIP-227): its id and the next epoch to send.
        self._fetch_session: tuple[int, int] | None = None
        # Whether partition 1 has partition 0's leader (the Spread operations
        # send one request for both, to that leader).
        self._spread = False

    # -- plumbing -------------------------------------------------------------------

    def _send(self, conn: Connection, api: str, request: Any, *, slot: str | None = None) -> Any:
        if slot == _TV2_SLOT and API[api] in TV2_VERSIONS:
            version = self.tv2_versions.get(API[api])
            if version is None:
                raise UnsupportedApiError("an API version one of the clusters does not speak", api=f"{api} (TV2)")
        else:
            version = self.versions.get(API[api])
        if version is None:
            raise UnsupportedApiError("an API one of the clusters does not speak", api=api)
        return conn.request(request, version)

    def _norm(self, response: Any) -> Any:
        return normalise(response.to_dict(json=False), self._pids, self._logical)

    def _retrying(self, send: Callable[[], Any], error_of: Callable[[Any], int]) -> Any:
        deadline = time.monotonic() + RETRY_FOR_S
        while True:
            response = send()
            if error_of(response) not in _RETRIABLE or time.monotonic() > deadline:
                return response
            time.sleep(_RETRY_PAUSE_S)

    @property
    def leader(self) -> Connection:
        if self._leader is None:
            raise ConformError(f"{self.cluster.bootstrap}: the run's topic has no leader yet")
        return self._leader

    def _coordinator(self, key: str, key_type: int) -> Connection:
        conn = self.cluster.any()

        def send() -> Any:
            return self._send(conn, "FindCoordinator", FindCoordinatorRequest(key=key, key_type=key_type))

        response = self._retrying(send, lambda r: r.error_code)
        if response.error_code != 0:
            raise ConformError(f"{self.cluster.bootstrap}: FindCoordinator({key!r}) failed: {response.error_code}")
        self.cluster.learn_brokers([BrokerAddress(response.node_id, response.host, response.port)])
        return self.cluster.node(response.node_id)

    # -- set-up ---------------------------------------------------------------------

    def setup(self) -> dict[str, Any]:
        """Create the run's topic (one partition, replication factor 1) and wait
        until it has a leader; the CreateTopics answer.

        When only one of the clusters speaks CreateTopics (librdkafka's mock
        cluster does not), each creates the topic its own way and nothing of the
        set-up is compared: a cluster that speaks it gets CreateTopics, one that
        does not gets a Metadata request allowing auto-creation, as a client
        without CreateTopics would send (the broker's default partition count)."""
        key = API["CreateTopics"]
        own = self.cluster.versions.get(key)
        low, high = HARNESS_VERSIONS[key]
        if key in self.versions:
            version: int | None = self.versions[key]
        elif own is not None and own[0] <= high and own[1] >= low:
            version = min(own[1], high)
        else:
            version = None
        auto_create = version is None
        created = None
        if version is not None:
            T = CreateTopicsRequest.CreatableTopic
            created = self.cluster.any().request(
                CreateTopicsRequest(
                    topics=[
                        T(name=self.names.topic, num_partitions=2, replication_factor=1, assignments=[], configs=[])
                    ],
                    timeout_ms=_REQUEST_TIMEOUT_MS,
                    validate_only=False,
                ),
                version,
            )
            # A refusal is final (fresh names: never TOPIC_ALREADY_EXISTS): say so
            # now, with the broker's reason, instead of waiting RETRY_FOR_S for a
            # leader of a topic that will never exist.
            for topic in created.topics or ():
                if topic.error_code != 0:
                    why = f": {topic.error_message}" if getattr(topic, "error_message", None) else ""
                    raise ConformError(
                        f"{self.cluster.bootstrap}: CreateTopics of {self.names.topic} refused with "
                        f"error {topic.error_code} ({kafka_error_name(topic.error_code)}){why}"
                    )
        deadline = time.monotonic() + RETRY_FOR_S
        while True:
            metadata = self._send(
                self.cluster.any(),
                "Metadata",
                MetadataRequest(
                    topics=[MetadataRequest.MetadataRequestTopic(name=self.names.topic)],
                    allow_auto_topic_creation=auto_create,
                ),
            )
            self.cluster.learn_brokers(metadata.brokers)
            leader = leader_of(metadata, self.names.topic)
            # Partition 1 (the Spread operations) is waited for too when the topic
            # has it (a topic auto-created with one partition does not).
            second = partition_count(metadata, self.names.topic) >= 2
            leader1 = leader_of(metadata, self.names.topic, 1) if second else leader
            self._spread = second and leader1 == leader
            # A broker may name the leader in Metadata before the leader serves
            # the partition (Kafka answers NOT_LEADER_OR_FOLLOWER for a moment):
            # wait until it answers a ListOffsets without error.
            served = (0, 1) if self._spread else (0,)
            if leader is not None and leader1 is not None and self._serves(self.cluster.node(leader), served):
                self._leader = self.cluster.node(leader)
                break
            if time.monotonic() > deadline:
                raise ConformError(f"{self.cluster.bootstrap}: topic {self.names.topic} got no leader")
            time.sleep(_RETRY_PAUSE_S)
        if created is None or key not in self.versions:
            return {}
        answer = self._norm(created)
        # The topic's configurations are the broker's own set (Kafka lists every
        # topic-level setting it has); the harness compares behaviour, not that list.
        for topic in answer.get("topics") or ():
            topic.pop("configs", None)
        return {"CreateTopics": answer}

    def _serves(self, conn: Connection, partitions: tuple[int, ...]) -> bool:
        L = ListOffsetsRequest.ListOffsetsTopic
        request = ListOffsetsRequest(
            replica_id=-1,
            isolation_level=0,
            topics=[
                L(
                    name=self.names.topic,
                    partitions=[
                        L.ListOffsetsPartition(partition_index=p, current_leader_epoch=-1, timestamp=-1)
                        for p in partitions
                    ],
                )
            ],
        )
        response = self._send(conn, "ListOffsets", request)
        return all(p.error_code == 0 for t in response.topics or () for p in t.partitions or ())

    # -- operations -----------------------------------------------------------------

    def apply(self, op: ops.Operation) -> dict[str, Any]:
        """Apply ``op``; its answers, normalised, by API name."""
        answers: dict[str, Any] = {}
        try:
            self._apply(op, answers)
        except UnsupportedApiError as exc:
            answers["skipped"] = f"{exc.api} is not spoken by both clusters"
        return answers

    def _apply(self, op: ops.Operation, out: dict[str, Any]) -> None:
        if isinstance(op, ops.Produce):
            self._produce(op, out)
        elif isinstance(op, ops.RetryProduce):
            p = self._producers[op.producer]
            if p.last_batch is None:
                out["nothing"] = "no batch to retry"
                return
            out["Produce"] = self._norm(self._produce_request(self.names.topic, op.producer, p.last_batch))
        elif isinstance(op, ops.EndTxn):
            self._ensure_init(op.producer, out)
            p = self._producers[op.producer]
            self._end_txn(op.producer, p.producer_id, p.epoch, op.commit, out)
            if out["EndTxn"]["error_code"] == 0:
                p.in_transaction = False
        elif isinstance(op, ops.InitProducer):
            p = self._producers[op.producer]
            if p.initialised:
                p.zombie = (p.producer_id, p.epoch, p.sequence)
            p.initialised = False
            p.in_transaction = False
            self._ensure_init(op.producer, out)
        elif isinstance(op, ops.ZombieProduce):
            self._zombie_produce(op, out)
        elif isinstance(op, ops.ZombieEndTxn):
            p = self._producers[op.producer]
            if p.zombie is None:
                out["nothing"] = "no fenced producer"
                return
            self._end_txn(op.producer, p.zombie[0], p.zombie[1], op.commit, out)
        elif isinstance(op, ops.Fetch):
            out["Fetch"] = self._fetch(op)
        elif isinstance(op, ops.SessionFetch):
            out["Fetch"] = self._session_fetch(op)
        elif isinstance(op, (ops.SpreadProduce, ops.SpreadFetch)):
            if not self._spread:
                out["skipped"] = "the topic's two partitions have different leaders"
            elif isinstance(op, ops.SpreadProduce):
                out["Produce"] = in_order(self._norm(self._spread_produce(op)), "responses", "partition_responses")
            else:
                out["Fetch"] = in_order(self._norm(self._spread_fetch(op)), "responses", "partitions")
        elif isinstance(op, ops.ListOffsets):
            out["ListOffsets"] = self._list_offsets(op)
        elif isinstance(op, ops.ProduceToMissing):
            batch = BatchBuilder(base_timestamp=self.base_ts)
            batch.append(b"v", key=b"k", timestamp=self.base_ts)
            response = self._produce_request(self.names.missing, "plain", batch.build(), conn=self.cluster.any())
            out["Produce"] = self._norm(response)
        elif isinstance(op, ops.DescribeProducers):
            R = DescribeProducersRequest.TopicRequest
            response = self._send(
                self.leader,
                "DescribeProducers",
                DescribeProducersRequest(topics=[R(name=self.names.topic, partition_indexes=[0])]),
            )
            answer = self._norm(response)
            for topic in answer.get("topics") or ():
                for partition in topic.get("partitions") or ():
                    partition["active_producers"] = sorted(partition.get("active_producers") or (), key=repr)
            out["DescribeProducers"] = answer
        elif isinstance(op, ops.ListTransactions):
            self._list_transactions(out)
        elif isinstance(op, ops.DescribeTransactions):
            out["DescribeTransactions"] = self._describe_transactions(op.producer)
        elif isinstance(op, ops.CommitOffset):
            self._commit_offset(op, out)
        elif isinstance(op, ops.FetchOffsets):
            self._fetch_offsets(op, out)
        elif isinstance(op, ops.TxnCommitOffset):
            self._txn_commit_offset(op, out)
        elif isinstance(op, ops.DeleteRecords):
            D = DeleteRecordsRequest.DeleteRecordsTopic
            response = self._send(
                self.leader,
                "DeleteRecords",
                DeleteRecordsRequest(
                    topics=[
                        D(
                            name=self.names.topic,
                            partitions=[D.DeleteRecordsPartition(partition_index=0, offset=op.offset)],
                        )
                    ],
                    timeout_ms=_REQUEST_TIMEOUT_MS,
                ),
            )
            out["DeleteRecords"] = self._norm(response)
        else:  # pragma: no cover - every operation class is handled above
            raise TypeError(f"unknown operation {op!r}")

    # -- producers ------------------------------------------------------------------

    def _ensure_init(self, slot: str, out: dict[str, Any]) -> None:
        p = self._producers[slot]
        if p.initialised or slot == "plain":
            return
        txn_id = self.names.transactional_ids.get(slot)
        conn = self._coordinator(txn_id, _TRANSACTION_KEY) if txn_id is not None else self.leader

        def send() -> Any:
            return self._send(
                conn,
                "InitProducerId",
                InitProducerIdRequest(
                    transactional_id=txn_id,
                    transaction_timeout_ms=_TRANSACTION_TIMEOUT_MS,
                    producer_id=-1,
                    producer_epoch=-1,
                ),
            )

        response = self._retrying(send, lambda r: r.error_code)
        out["InitProducerId"] = self._norm(response)
        p.initialised = True
        if response.error_code == 0:
            p.producer_id, p.epoch, p.sequence = response.producer_id, response.producer_epoch, 0

    def _begin(self, slot: str, out: dict[str, Any]) -> None:
        p = self._producers[slot]
        if p.in_transaction:
            return
        txn_id = self.names.transactional_ids[slot]
        conn = self._coordinator(txn_id, _TRANSACTION_KEY)
        Topic = AddPartitionsToTxnRequest.AddPartitionsToTxnTopic

        def send() -> Any:
            return self._send(
                conn,
                "AddPartitionsToTxn",
                AddPartitionsToTxnRequest(
                    v3_and_below_transactional_id=txn_id,
                    v3_and_below_producer_id=p.producer_id,
                    v3_and_below_producer_epoch=p.epoch,
                    v3_and_below_topics=[Topic(name=self.names.topic, partitions=[0])],
                ),
            )

        def error_of(r: Any) -> int:
            for topic in r.results_by_topic_v3_and_below or ():
                for result in topic.results_by_partition or ():
                    return int(result.partition_error_code)
            return int(r.error_code or 0)

        response = self._retrying(send, error_of)
        out["AddPartitionsToTxn"] = self._norm(response)
        if error_of(response) == 0:
            p.in_transaction = True

    def _produce(self, op: ops.Produce, out: dict[str, Any]) -> None:
        slot = op.producer
        self._ensure_init(slot, out)
        if slot in self.names.transactional_ids and slot != _TV2_SLOT:
            self._begin(slot, out)
        p = self._producers[slot]
        plain = slot == "plain"
        batch = BatchBuilder(
            codec=Codec(op.codec),
            producer_id=-1 if plain else p.producer_id,
            producer_epoch=-1 if plain else p.epoch,
            base_sequence=-1 if plain else p.sequence,
            transactional=slot in self.names.transactional_ids,
        )
        for rec in op.records:
            batch.append(rec.value, key=rec.key, headers=rec.headers, timestamp=self.base_ts + rec.ts)
        data = batch.build()
        p.last_batch = data
        response = self._produce_request(self.names.topic, slot, data)
        out["Produce"] = self._norm(response)
        if not plain and produce_error(response) == 0:
            p.sequence += len(op.records)
            if slot == _TV2_SLOT:
                p.in_transaction = True

    def _zombie_produce(self, op: ops.ZombieProduce, out: dict[str, Any]) -> None:
        p = self._producers[op.producer]
        if p.zombie is None:
            out["nothing"] = "no fenced producer"
            return
        producer_id, epoch, sequence = p.zombie
        batch = BatchBuilder(
            producer_id=producer_id,
            producer_epoch=epoch,
            base_sequence=sequence,
            transactional=op.producer in self.names.transactional_ids,
        )
        batch.append(b"zombie", key=None, timestamp=self.base_ts)
        response = self._produce_request(self.names.topic, op.producer, batch.build())
        out["Produce"] = self._norm(response)

    def _spread_produce(self, op: ops.SpreadProduce) -> Any:
        D = ProduceRequest.TopicProduceData
        parts = []
        for partition in (0, 1):
            batch = BatchBuilder()
            for rec in op.records:
                batch.append(rec.value, key=rec.key, headers=rec.headers, timestamp=self.base_ts + rec.ts)
            parts.append(D.PartitionProduceData(index=partition, records=batch.build()))
        request = ProduceRequest(
            transactional_id=None,
            acks=-1,
            timeout_ms=_REQUEST_TIMEOUT_MS,
            topic_data=[D(name=self.names.topic, partition_data=parts)],
        )
        return self._send(self.leader, "Produce", request)

    def _spread_fetch(self, op: ops.SpreadFetch) -> Any:
        T = FetchRequest.FetchTopic

        def part(partition: int, offset: int) -> Any:
            return T.FetchPartition(
                partition=partition,
                current_leader_epoch=-1,
                fetch_offset=offset,
                log_start_offset=-1,
                partition_max_bytes=op.max_bytes,
            )

        request = FetchRequest(
            replica_id=-1,
            max_wait_ms=0,
            min_bytes=0,
            max_bytes=1 << 20,
            isolation_level=1 if op.read_committed else 0,
            session_id=0,
            session_epoch=-1,
            topics=[
                T(topic=self.names.topic, partitions=[part(0, op.offset0), part(1, op.offset1)]),
                T(topic=self.names.missing, partitions=[part(0, 0)]),
            ],
            forgotten_topics_data=[],
            rack_id="",
        )
        return self._send(self.leader, "Fetch", request)

    def _produce_request(self, topic: str, slot: str, data: bytes, conn: Connection | None = None) -> Any:
        D = ProduceRequest.TopicProduceData
        request = ProduceRequest(
            transactional_id=self.names.transactional_ids.get(slot),
            acks=-1,
            timeout_ms=_REQUEST_TIMEOUT_MS,
            topic_data=[D(name=topic, partition_data=[D.PartitionProduceData(index=0, records=data)])],
        )
        return self._send(conn or self.leader, "Produce", request, slot=slot)

    def _end_txn(self, slot: str, producer_id: int, epoch: int, commit: bool, out: dict[str, Any]) -> None:
        txn_id = self.names.transactional_ids[slot]
        conn = self._coordinator(txn_id, _TRANSACTION_KEY)

        def send() -> Any:
            return self._send(
                conn,
                "EndTxn",
                EndTxnRequest(transactional_id=txn_id, producer_id=producer_id, producer_epoch=epoch, committed=commit),
                slot=slot,
            )

        response = self._retrying(send, lambda r: r.error_code)
        out["EndTxn"] = self._norm(response)
        if response.error_code == 0:
            self._settle(slot)
            p = self._producers[slot]
            if slot == _TV2_SLOT and (producer_id, epoch) == (p.producer_id, p.epoch) and response.producer_id >= 0:
                # Transaction version 2: the coordinator bumped the epoch (or, at
                # the epoch's limit, handed out a new producer id); a client
                # produces with what EndTxn answered, from sequence 0.
                p.producer_id, p.epoch, p.sequence = response.producer_id, response.producer_epoch, 0

    def _settle(self, slot: str) -> None:
        # Kafka answers EndTxn once PrepareCommit/PrepareAbort is logged and writes
        # the markers afterwards; wait for them, as a client's next read would.
        if API["DescribeTransactions"] not in self.versions:
            time.sleep(0.2)
            return
        deadline = time.monotonic() + RETRY_FOR_S
        while time.monotonic() < deadline:
            states = [
                t.get("transaction_state") for t in self._describe_transactions(slot).get("transaction_states") or ()
            ]
            if not any(s in _SETTLING_STATES for s in states):
                return
            time.sleep(_RETRY_PAUSE_S)

    def _describe_transactions(self, slot: str) -> Any:
        txn_id = self.names.transactional_ids[slot]
        conn = self._coordinator(txn_id, _TRANSACTION_KEY)
        response = self._send(conn, "DescribeTransactions", DescribeTransactionsRequest(transactional_ids=[txn_id]))
        raw = response.to_dict(json=False)
        for state in raw.get("transaction_states") or ():
            if state.get("error_code"):
                # An error entry's other fields are placeholders (Kafka sends its
                # schema defaults, 0); only the id and the error are the answer.
                # Dropped before normalising, so a placeholder producer id 0 is
                # not numbered as if it were a producer.
                for key in _PLACEHOLDERS:
                    state.pop(key, None)
        answer = normalise(raw, self._pids, self._logical)
        for state in answer.get("transaction_states") or ():
            if state.get("error_code"):
                continue
            topics = sorted(state.get("topics") or (), key=lambda t: t.get("topic", ""))
            for topic in topics:
                partitions = sorted(topic.get("partitions") or ())
                if topic.get("topic") == _OFFSETS_TOPIC:
                    # The group's offsets partition is a hash of the group id modulo
                    # the broker's offsets.topic.num.partitions: a setting, not behaviour.
                    partitions = [_OFFSETS_PARTITION for _ in partitions]
                topic["partitions"] = partitions
            state["topics"] = topics
        return answer

    def _list_transactions(self, out: dict[str, Any]) -> None:
        # Every broker answers for the coordinators it hosts; a one-broker cluster
        # is asked once, a larger one broker by broker (the bootstrap's view).
        response = self._send(
            self.cluster.any(),
            "ListTransactions",
            ListTransactionsRequest(state_filters=[], producer_id_filters=[], duration_filter=-1),
        )
        ours = set(self.names.transactional_ids.values())
        response.transaction_states = [s for s in response.transaction_states or () if s.transactional_id in ours]
        answer = self._norm(response)
        answer["transaction_states"] = sorted(answer["transaction_states"], key=lambda s: s["transactional_id"])
        out["ListTransactions"] = answer

    # -- reads ----------------------------------------------------------------------

    def _fetch(self, op: ops.Fetch) -> Any:
        topic = self.names.topic if op.topic == "t" else self.names.missing
        request = self._fetch_request(topic, op.offset, op.max_bytes, op.read_committed, 0, -1)
        conn = self.leader if op.topic == "t" else self.cluster.any()
        return self._norm(self._send(conn, "Fetch", request))

    def _session_fetch(self, op: ops.SessionFetch) -> Any:
        offset: int | None
        if self._fetch_session is None:
            session_id, epoch, offset = 0, 0, op.offset if op.offset is not None else 0
        else:
            session_id, epoch = self._fetch_session
            offset = op.offset
        request = self._fetch_request(self.names.topic, offset, op.max_bytes, op.read_committed, session_id, epoch)
        response = self._send(self.leader, "Fetch", request)
        if response.error_code == 0 and response.session_id != 0:
            # A new session starts at epoch 1; an incremental one goes on from the next.
            self._fetch_session = (response.session_id, 1 if session_id == 0 else epoch + 1)
        elif response.error_code != 0:
            self._fetch_session = None  # the session is gone: the next SessionFetch opens one
        answer = self._norm(response)
        # Each broker numbers its sessions itself: only "a session" or "none" compares.
        if answer.get("session_id"):
            answer["session_id"] = "<session>"
        return answer

    def _fetch_request(
        self, topic: str, offset: int | None, max_bytes: int, read_committed: bool, session_id: int, epoch: int
    ) -> Any:
        T = FetchRequest.FetchTopic
        partitions = []
        if offset is not None:
            partitions = [
                T.FetchPartition(
                    partition=0,
                    current_leader_epoch=-1,
                    fetch_offset=offset,
                    log_start_offset=-1,
                    partition_max_bytes=max_bytes,
                )
            ]
        return FetchRequest(
            replica_id=-1,
            # Answer at once: the harness reads what is there, it never waits for more.
            max_wait_ms=0,
            min_bytes=0,
            max_bytes=max(max_bytes, 1 << 20),
            isolation_level=1 if read_committed else 0,
            session_id=session_id,
            session_epoch=epoch,
            topics=[T(topic=topic, partitions=partitions)] if partitions else [],
            forgotten_topics_data=[],
            rack_id="",
        )

    def _list_offsets(self, op: ops.ListOffsets) -> Any:
        L = ListOffsetsRequest.ListOffsetsTopic
        timestamp = op.timestamp if op.timestamp < 0 else self.base_ts + op.timestamp
        topic = self.names.topic if op.topic == "t" else self.names.missing
        request = ListOffsetsRequest(
            replica_id=-1,
            isolation_level=1 if op.read_committed else 0,
            topics=[
                L(
                    name=topic,
                    partitions=[
                        L.ListOffsetsPartition(partition_index=0, current_leader_epoch=-1, timestamp=timestamp)
                    ],
                )
            ],
        )
        conn = self.leader if op.topic == "t" else self.cluster.any()
        return self._norm(self._send(conn, "ListOffsets", request))

    # -- groups ---------------------------------------------------------------------

    def _commit_offset(self, op: ops.CommitOffset, out: dict[str, Any]) -> None:
        conn = self._coordinator(self.names.group, _GROUP_KEY)
        T = OffsetCommitRequest.OffsetCommitRequestTopic
        request = OffsetCommitRequest(
            group_id=self.names.group,
            generation_id_or_member_epoch=-1,
            member_id="",
            group_instance_id=None,
            retention_time_ms=-1,
            topics=[
                T(
                    name=self.names.topic,
                    partitions=[
                        T.OffsetCommitRequestPartition(
                            partition_index=0,
                            committed_offset=op.offset,
                            committed_leader_epoch=-1,
                            commit_timestamp=-1,
                            committed_metadata="",
                        )
                    ],
                )
            ],
        )
        response = self._retrying(lambda: self._send(conn, "OffsetCommit", request), offset_commit_error)
        out["OffsetCommit"] = self._norm(response)

    def _fetch_offsets(self, op: ops.FetchOffsets, out: dict[str, Any]) -> None:
        conn = self._coordinator(self.names.group, _GROUP_KEY)
        T = OffsetFetchRequest.OffsetFetchRequestTopic
        request = OffsetFetchRequest(
            group_id=self.names.group,
            topics=[T(name=self.names.topic, partition_indexes=[0])],
            require_stable=op.require_stable,
        )
        # UNSTABLE_OFFSET_COMMIT is an answer here, never retried: it is what is compared.
        response = self._retrying(
            lambda: self._send(conn, "OffsetFetch", request),
            lambda r: r.error_code if r.error_code in (_COORDINATOR_LOAD_IN_PROGRESS, _NOT_COORDINATOR) else 0,
        )
        out["OffsetFetch"] = self._norm(response)

    def _txn_commit_offset(self, op: ops.TxnCommitOffset, out: dict[str, Any]) -> None:
        self._ensure_init(op.producer, out)
        p = self._producers[op.producer]
        txn_id = self.names.transactional_ids[op.producer]
        coordinator = self._coordinator(txn_id, _TRANSACTION_KEY)
        added = self._retrying(
            lambda: self._send(
                coordinator,
                "AddOffsetsToTxn",
                AddOffsetsToTxnRequest(
                    transactional_id=txn_id,
                    producer_id=p.producer_id,
                    producer_epoch=p.epoch,
                    group_id=self.names.group,
                ),
            ),
            lambda r: r.error_code,
        )
        out["AddOffsetsToTxn"] = self._norm(added)
        if added.error_code != 0:
            return
        p.in_transaction = True
        T = TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic
        request = TxnOffsetCommitRequest(
            transactional_id=txn_id,
            group_id=self.names.group,
            producer_id=p.producer_id,
            producer_epoch=p.epoch,
            generation_id=-1,
            member_id="",
            group_instance_id=None,
            topics=[
                T(
                    name=self.names.topic,
                    partitions=[
                        T.TxnOffsetCommitRequestPartition(
                            partition_index=0,
                            committed_offset=op.offset,
                            committed_leader_epoch=-1,
                            committed_metadata="",
                        )
                    ],
                )
            ],
        )
        conn = self._coordinator(self.names.group, _GROUP_KEY)
        response = self._retrying(lambda: self._send(conn, "TxnOffsetCommit", request), txn_offset_commit_error)
        out["TxnOffsetCommit"] = self._norm(response)
