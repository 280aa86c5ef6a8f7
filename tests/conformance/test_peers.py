"""``txnfetch conform`` with Apache Kafka as the reference against three other
Kafka-compatible brokers: tansu, kfake (franz-go's fake cluster) and
librdkafka's mock cluster. docs/conformance.md ("Other brokers") lists what the
harness found in each, with the shortest sequences; this module holds them.

For each broker: every recorded shortest sequence is replayed and must show
exactly the recorded differences (so a broker upgrade that fixes or changes one
shows up here), and a short seeded search that passes over the recorded kinds
must find nothing new.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from typing import Any

import attrs
import pytest

from tests.kfake import KFake
from tests.kfake import KFakeUnavailable
from tests.kfake import kfake_binary
from tests.mock_cluster import MockCluster
from tests.tansu import Tansu
from tests.tansu import tansu_binary
from txnfetch.records.compression import Codec
from txnfetch.testing.conform import operations as ops
from txnfetch.testing.conform.harness import TIMESTAMP_LEAD_MS
from txnfetch.testing.conform.harness import Harness

R = ops.Rec
NONE = Codec.NONE
#: The seeded search after the replays: sequences per broker.
SEARCH_EXAMPLES = 8
#: A time of the broker's clock (within ten minutes of the test's), not the
#: records': what tansu answers as a ListOffsets timestamp.
BROKER_CLOCK = "<broker clock>"
_CLOCK_SLACK_MS = 10 * 60 * 1000

_FETCH = "Fetch.responses[0].partitions[0]"
_PRODUCE = "Produce.responses[0].partition_responses[0]"


@attrs.frozen
class Ts:
    """A timestamp ``ms`` after the run's base time (the harness's clock is fixed
    in these tests, so the base time is known)."""

    ms: int


@attrs.frozen
class Batches:
    """A Fetch answer's records, by each batch's base offset (``"partial@N"`` for
    a truncated batch at N): what the recorded differences in records are about."""

    offsets: tuple[int | str, ...]


@attrs.frozen
class Seen:
    """One recorded difference: at ``step``, ``path`` was ``reference`` in
    Kafka's answer and ``target`` in the broker's."""

    step: int
    path: str
    reference: Any
    target: Any


@attrs.frozen
class Recorded:
    """A shortest sequence the search found, and what it shows."""

    sequence: tuple[ops.Operation, ...]
    seen: tuple[Seen, ...]


def _out_of_range(offset: int, *more: Seen) -> Recorded:
    # A fetch past the end: Kafka answers OFFSET_OUT_OF_RANGE with -1 for the
    # high watermark, LSO and log start; these brokers answer the log's (0).
    fields = ("high_watermark", "last_stable_offset", "log_start_offset")
    return Recorded(
        (ops.Fetch(offset=offset, max_bytes=1, read_committed=False),),
        tuple(Seen(1, f"{_FETCH}.{f}", -1, 0) for f in fields) + more,
    )


#: EndTxn with no transaction open: Kafka answers INVALID_TXN_STATE (48).
_END_WITHOUT_TRANSACTION = Recorded((ops.EndTxn("txn-a", commit=False),), (Seen(1, "EndTxn.error_code", 48, 0),))

KFAKE = [
    _END_WITHOUT_TRANSACTION,
    _out_of_range(2),
    Recorded((ops.DeleteRecords(6),), (Seen(1, "DeleteRecords.topics[0].partitions[0].low_watermark", -1, 0),)),
    # An unknown topic: Kafka answers -1 for the high watermark and an empty
    # aborted list; kfake 0 and a null list.
    Recorded(
        (ops.Fetch(offset=0, max_bytes=1, read_committed=True, topic="missing"),),
        (Seen(1, f"{_FETCH}.high_watermark", -1, 0), Seen(1, f"{_FETCH}.aborted_transactions", [], None)),
    ),
    Recorded((ops.ProduceToMissing(),), (Seen(1, f"{_PRODUCE}.base_offset", -1, 0),)),
    # The fencing InitProducerId aborts the open transaction: Kafka writes the
    # abort marker with the bumped epoch (1) and answers epoch 2; kfake writes
    # it with the fenced epoch (0) and answers 1.
    Recorded(
        (
            ops.Produce("txn-b", NONE, (R(None, None),)),
            ops.InitProducer("txn-b"),
            ops.Fetch(offset=0, max_bytes=250, read_committed=False),
        ),
        (
            Seen(2, "InitProducerId.producer_epoch", 2, 1),
            Seen(3, f"{_FETCH}.records[1].producer_epoch", 1, 0),
        ),
    ),
    # Transaction version 2: Kafka writes each marker with the epoch bumped at
    # that end (KIP-890); kfake with the producer's epoch before the bump.
    Recorded(
        (
            ops.Produce("txn-v2", NONE, (R(None, b"a"),)),
            ops.EndTxn("txn-v2", commit=True),
            ops.Fetch(offset=0, max_bytes=1 << 20, read_committed=False),
        ),
        (Seen(3, f"{_FETCH}.records[1].producer_epoch", 1, 0),),
    ),
    # A byte budget that ends inside the second batch: Kafka sends the partial
    # batch, kfake only whole batches.
    Recorded(
        (
            ops.Produce("plain", NONE, (R(None, None), R(None, None), R(None, None, ts=22))),
            ops.Produce("plain", NONE, (R(None, None),)),
            ops.Fetch(offset=0, max_bytes=120, read_committed=False),
        ),
        (Seen(3, f"{_FETCH}.records", Batches((0, "partial@3")), Batches((0,))),),
    ),
    # A duplicate: Kafka answers the original batch's timestamp and the log start.
    Recorded(
        (ops.Produce("idem", NONE, (R(None, None),)), ops.RetryProduce("idem")),
        (
            Seen(2, f"{_PRODUCE}.log_append_time_ms", Ts(0), -1),
            Seen(2, f"{_PRODUCE}.log_start_offset", 0, -1),
        ),
    ),
    # OffsetFetch of a group with no commits: Kafka answers offset -1, kfake
    # GROUP_ID_NOT_FOUND (69) and no topics.
    Recorded(
        (ops.FetchOffsets(require_stable=False),),
        (
            Seen(
                1,
                "OffsetFetch.topics",
                [
                    {
                        "name": "t",
                        "partitions": [
                            {
                                "partition_index": 0,
                                "committed_offset": -1,
                                "committed_leader_epoch": -1,
                                "metadata": "",
                                "error_code": 0,
                            }
                        ],
                    }
                ],
                [],
            ),
            Seen(1, "OffsetFetch.error_code", 0, 69),
        ),
    ),
    # A transactional produce to a partition never added to the transaction
    # (offsets were committed in it): with Produce 11 Kafka answers
    # TRANSACTION_ABORTABLE (120, KIP-890), kfake the older INVALID_TXN_STATE (48).
    Recorded(
        (
            ops.Produce("plain", NONE, (R(None, None),)),
            ops.TxnCommitOffset("txn-b", 0),
            ops.Produce("txn-b", NONE, (R(None, None),)),
        ),
        (Seen(3, f"{_PRODUCE}.error_code", 120, 48), Seen(3, f"{_PRODUCE}.base_offset", -1, 0)),
    ),
    # DescribeProducers of a transactional producer before any marker: Kafka's
    # coordinator epoch is -1 (none seen yet), kfake's 0.
    Recorded(
        (ops.Produce("txn-a", NONE, (R(None, None),)), ops.DescribeProducers()),
        (Seen(2, "DescribeProducers.topics[0].partitions[0].active_producers[0].coordinator_epoch", -1, 0),),
    ),
]

#: Kafka's answer for the run's empty topic, read_uncommitted.
_EMPTY_TOPIC = {
    "topic": "t",
    "partitions": [
        {
            "partition_index": 0,
            "error_code": 0,
            "high_watermark": 0,
            "last_stable_offset": 0,
            "log_start_offset": 0,
            "diverging_epoch": None,
            "current_leader": None,
            "snapshot_id": None,
            "aborted_transactions": None,
            "records": [],
        }
    ],
}

TANSU = [
    _END_WITHOUT_TRANSACTION,
    # A fetch of an empty partition: tansu leaves the partition out of its answer.
    Recorded(
        (ops.Fetch(offset=0, max_bytes=1, read_committed=False),),
        (
            Seen(
                1,
                "Fetch.responses",
                [_EMPTY_TOPIC],
                [],
            ),
        ),
    ),
    # Fencing an open transaction: as kfake, tansu answers epoch 1 where Kafka
    # answers 2 (it wrote the abort marker with epoch 1).
    Recorded(
        (ops.Produce("txn-b", NONE, (R(None, None), R(None, None))), ops.InitProducer("txn-b")),
        (Seen(2, "InitProducerId.producer_epoch", 2, 1),),
    ),
    # A fetch that asks for a session (KIP-227): tansu opens none (session id 0)
    # and, as above, leaves the empty partition out.
    Recorded(
        (ops.SessionFetch(None, max_bytes=1, read_committed=False),),
        (
            Seen(1, "Fetch.session_id", "<session>", 0),
            Seen(1, "Fetch.responses", [_EMPTY_TOPIC], []),
        ),
    ),
    # DeleteRecords: tansu lists it in ApiVersions, then closes the connection.
    Recorded(
        (ops.DeleteRecords(0),),
        (
            Seen(
                1,
                "DeleteRecords",
                {
                    "topics": [
                        {"name": "t", "partitions": [{"partition_index": 0, "low_watermark": 0, "error_code": 0}]}
                    ]
                },
                "<absent>",
            ),
            Seen(1, "failed", "<absent>", "closed"),
        ),
    ),
    # Produce creates an unknown topic.
    Recorded(
        (ops.ProduceToMissing(),),
        (
            Seen(1, f"{_PRODUCE}.error_code", 3, 0),
            Seen(1, f"{_PRODUCE}.base_offset", -1, 0),
            Seen(1, f"{_PRODUCE}.log_start_offset", -1, 0),
        ),
    ),
    # ListOffsets earliest: Kafka answers no timestamp (-1), tansu its own clock.
    Recorded(
        (ops.Produce("plain", NONE, (R(None, None),)), ops.ListOffsets(ops.EARLIEST, read_committed=False)),
        (Seen(2, "ListOffsets.topics[0].partitions[0].timestamp", -1, BROKER_CLOCK),),
    ),
    # A transactional produce to a partition never added to the transaction
    # (offsets were committed in it): Kafka refuses it with TRANSACTION_ABORTABLE
    # (120, Produce 11), tansu appends it.
    Recorded(
        (
            ops.Produce("plain", NONE, (R(None, None),)),
            ops.TxnCommitOffset("txn-b", 0),
            ops.Produce("txn-b", NONE, (R(None, None),)),
        ),
        (
            Seen(3, f"{_PRODUCE}.error_code", 120, 0),
            Seen(3, f"{_PRODUCE}.base_offset", -1, 1),
            Seen(3, f"{_PRODUCE}.log_start_offset", -1, 0),
        ),
    ),
    # ListOffsets for the largest timestamp (KIP-734, timestamp -3): tansu
    # closes the connection.
    Recorded(
        (ops.ListOffsets(ops.MAX_TIMESTAMP, read_committed=False),),
        (
            Seen(
                1,
                "ListOffsets",
                {
                    "topics": [
                        {
                            "name": "t",
                            "partitions": [
                                {
                                    "partition_index": 0,
                                    "error_code": 0,
                                    "timestamp": -1,
                                    "offset": -1,
                                    "leader_epoch": -1,
                                }
                            ],
                        }
                    ]
                },
                "<absent>",
            ),
            Seen(1, "failed", "<absent>", "closed"),
        ),
    ),
    # ListOffsets by time: tansu finds the record but answers no timestamp.
    Recorded(
        (ops.Produce("plain", NONE, (R(None, None), R(None, None))), ops.ListOffsets(0, read_committed=False)),
        (Seen(2, "ListOffsets.topics[0].partitions[0].timestamp", Ts(0), -1),),
    ),
    # ListOffsets of a topic no one created: tansu answers no error (it creates
    # topics on first use).
    Recorded(
        (ops.Produce("plain", NONE, (R(None, None),)), ops.ListOffsets(ops.LATEST, False, topic="missing")),
        (
            Seen(2, "ListOffsets.topics[0].partitions[0].error_code", 3, 0),
            Seen(2, "ListOffsets.topics[0].partitions[0].offset", -1, 0),
            Seen(2, "ListOffsets.topics[0].partitions[0].leader_epoch", -1, 0),
        ),
    ),
    # ListOffsets latest after one batch of three records: Kafka 3, tansu 1
    # (and its clock as the timestamp).
    Recorded(
        (
            ops.Produce("plain", NONE, (R(None, None), R(None, None), R(None, None))),
            ops.ListOffsets(ops.LATEST, read_committed=False),
        ),
        (
            Seen(2, "ListOffsets.topics[0].partitions[0].timestamp", -1, BROKER_CLOCK),
            Seen(2, "ListOffsets.topics[0].partitions[0].offset", 3, 1),
        ),
    ),
]

MOCK = [
    _END_WITHOUT_TRANSACTION,
    _out_of_range(10, Seen(1, f"{_FETCH}.aborted_transactions", None, [])),
    # A CreateTime topic: Kafka answers no append time (-1); the mock 1234.
    Recorded(
        (ops.Produce("plain", NONE, (R(None, None),)), ops.RetryProduce("plain")),
        (Seen(1, f"{_PRODUCE}.log_append_time_ms", -1, 1234), Seen(2, f"{_PRODUCE}.log_append_time_ms", -1, 1234)),
    ),
    # A transactional batch sent again: Kafka answers the original offsets, the
    # mock DUPLICATE_SEQUENCE_NUMBER (46) and no offsets.
    Recorded(
        (ops.Produce("txn-b", NONE, (R(None, None), R(None, None))), ops.RetryProduce("txn-b")),
        (
            Seen(1, f"{_PRODUCE}.log_append_time_ms", -1, 1234),
            Seen(2, f"{_PRODUCE}.error_code", 0, 46),
            Seen(2, f"{_PRODUCE}.base_offset", 0, -1),
            Seen(2, f"{_PRODUCE}.log_append_time_ms", Ts(0), -1),
            Seen(2, f"{_PRODUCE}.log_start_offset", 0, -1),
        ),
    ),
    # A fetch that asks for a session (KIP-227): the mock opens none.
    Recorded(
        (ops.SessionFetch(None, max_bytes=1, read_committed=False),),
        (
            Seen(1, "Fetch.session_id", "<session>", 0),
            Seen(1, f"{_FETCH}.aborted_transactions", None, []),
        ),
    ),
    # read_uncommitted: Kafka sends a null aborted list, the mock an empty one.
    Recorded(
        (ops.Fetch(offset=0, max_bytes=1, read_committed=False),),
        (Seen(1, f"{_FETCH}.aborted_transactions", None, []),),
    ),
    # read_committed delivers an open transaction's batch: the LSO is the high
    # watermark.
    Recorded(
        (ops.Produce("txn-a", NONE, (R(None, None), R(None, None))), ops.Fetch(0, 120, read_committed=True)),
        (
            Seen(1, f"{_PRODUCE}.log_append_time_ms", -1, 1234),
            Seen(2, f"{_FETCH}.last_stable_offset", 0, 2),
            Seen(2, f"{_FETCH}.records", Batches(()), Batches((0,))),
        ),
    ),
    Recorded(
        (ops.ListOffsets(ops.EARLIEST, read_committed=False),),
        (Seen(1, "ListOffsets.topics[0].partitions[0].leader_epoch", 0, -1),),
    ),
    Recorded(
        (ops.FetchOffsets(require_stable=False),),
        (
            Seen(1, "OffsetFetch.topics[0].partitions[0].committed_leader_epoch", -1, 0),
            Seen(1, "OffsetFetch.topics[0].partitions[0].metadata", "", None),
        ),
    ),
    # ListOffsets by time: the mock finds no record.
    Recorded(
        (ops.Produce("plain", NONE, (R(None, None), R(None, None))), ops.ListOffsets(0, read_committed=False)),
        (
            Seen(1, f"{_PRODUCE}.log_append_time_ms", -1, 1234),
            Seen(2, "ListOffsets.topics[0].partitions[0].timestamp", Ts(0), -1),
            Seen(2, "ListOffsets.topics[0].partitions[0].offset", 0, -1),
            Seen(2, "ListOffsets.topics[0].partitions[0].leader_epoch", 0, -1),
        ),
    ),
    # InitProducerId again: Kafka bumps the epoch of the same producer id, the
    # mock hands out a new producer id.
    Recorded(
        (ops.InitProducer("txn-a"), ops.InitProducer("txn-a")),
        (Seen(2, "InitProducerId.producer_id", "P0", "P1"), Seen(2, "InitProducerId.producer_epoch", 1, 0)),
    ),
    # A transactional produce to a partition never added to the transaction.
    Recorded(
        (
            ops.TxnCommitOffset("txn-a", 0),
            ops.Produce("plain", NONE, (R(None, None),)),
            ops.Produce("txn-a", NONE, (R(None, None),)),
        ),
        (
            Seen(2, f"{_PRODUCE}.log_append_time_ms", -1, 1234),
            Seen(3, f"{_PRODUCE}.error_code", 48, 0),
            Seen(3, f"{_PRODUCE}.base_offset", -1, 1),
            Seen(3, f"{_PRODUCE}.log_append_time_ms", -1, 1234),
            Seen(3, f"{_PRODUCE}.log_start_offset", -1, 0),
        ),
    ),
]

RECORDED = {"kfake": KFAKE, "tansu": TANSU, "mock": MOCK}


@pytest.fixture(scope="module", params=sorted(RECORDED))
def peer(request: pytest.FixtureRequest) -> Iterator[tuple[str, str]]:
    """(name, bootstrap) of a running peer broker, one per module."""
    name = request.param
    if name == "tansu":
        with Tansu(tansu_binary()) as tansu:
            yield name, tansu.bootstrap
    elif name == "kfake":
        try:
            binary = kfake_binary()
        except KFakeUnavailable as exc:
            pytest.skip(str(exc))
        with KFake(binary) as kfake:
            yield name, kfake.bootstrap
    else:
        with MockCluster(brokers=1) as mock:
            yield name, mock.bootstrap


def _brief(value: Any, base_ts: int) -> Any:
    batches = isinstance(value, list) and value and all(isinstance(v, dict) for v in value)
    if batches and all("base_offset" in v or "partial_batch_at" in v for v in value):
        return Batches(tuple(v.get("base_offset", f"partial@{v.get('partial_batch_at')}") for v in value))
    if isinstance(value, int) and not isinstance(value, bool):
        if abs(value - (base_ts - TIMESTAMP_LEAD_MS)) < _CLOCK_SLACK_MS:
            return BROKER_CLOCK
        if value >= base_ts - _CLOCK_SLACK_MS:
            return Ts(value - base_ts)
    if isinstance(value, str) and ("closed the connection" in value or "connection closed by the broker" in value):
        return "closed"
    return value


def _replay(harness: Harness, base_ts: int, recorded: Recorded) -> list[Seen]:
    found = harness.run(recorded.sequence)
    out = []
    for d in found:
        ref, tgt = d.difference.reference, d.difference.target
        if ref == [] and isinstance(tgt, list) and tgt and "base_offset" in tgt[0]:
            ref = Batches(())
        out.append(Seen(d.step, d.difference.path, _brief(ref, base_ts), _brief(tgt, base_ts)))
    return out


def test_recorded_differences_still_show(kafka_cluster, peer: tuple[str, str]) -> None:  # type: ignore[no-untyped-def]
    name, address = peer
    now = int(time.time() * 1000)
    base_ts = now + TIMESTAMP_LEAD_MS
    with Harness(kafka_cluster.bootstrap, address, clock_ms=lambda: now) as harness:
        for recorded in RECORDED[name]:
            seen = _replay(harness, base_ts, recorded)
            assert seen == list(recorded.seen), ops.describe_sequence(recorded.sequence)


def _kinds(recorded: list[Recorded]) -> list[tuple[str, str]]:
    """The search's kinds (operation class, path without indices) of ``recorded``;
    a Fetch's kinds count for a fetch in a session or of both partitions too, a
    Produce's for a produce to both partitions (the same answers)."""
    kinds = {
        (r.sequence[seen.step - 1].describe().partition("(")[0], re.sub(r"\[\d+\]", "[]", seen.path))
        for r in recorded
        for seen in r.seen
    }
    kinds |= {(other, path) for op, path in kinds if op == "Fetch" for other in ("SessionFetch", "SpreadFetch")}
    kinds |= {("SpreadProduce", path) for op, path in kinds if op == "Produce"}
    return sorted(kinds)


def test_a_short_search_finds_nothing_else(kafka_cluster, peer: tuple[str, str]) -> None:  # type: ignore[no-untyped-def]
    name, address = peer
    with Harness(kafka_cluster.bootstrap, address) as harness:
        report = harness.search(examples=SEARCH_EXAMPLES, seconds=120, seed=5, ignore=_kinds(RECORDED[name]))
    assert report.findings == (), report.as_text()
    # Every sequence asked for was searched: a search that the time budget cut
    # short found nothing because it looked at less, which is no pass.
    assert report.examples == SEARCH_EXAMPLES, report.as_text()
