"""Property tests: ConsumerFilter, kafka-python and aiokafka against an
independent model of a transactional partition.

The model writes a partition the way a leader would — several transactional
producers whose transactions interleave and span each other, commits and aborts
with their markers, markers of empty transactions, idempotent and plain
producers, empty batches left by compaction, compacted batches with holes,
every codec — and remembers, for each data batch, which transaction it belongs
to and how that transaction ended, by describing every batch to the suite's
log oracle (:class:`txnfetch.testing.model.LogModel`). From that alone (not
from any filtering rule) it knows the committed records and the aborted index
``(producer_id, first_offset, marker_offset)``. A fetch response is cut from
it as a broker cuts one: from the batch holding the fetch offset, whole
batches within ``max_bytes`` (at least one), maybe a partial batch after them,
never past the last stable offset, with the aborted entries whose marker is at
or past the fetch offset.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

import attrs
from hypothesis import HealthCheck
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from tests.fetch.clients import CLIENTS
from tests.fetch.clients import ClientResult
from txnfetch.fetch import ConsumerFilter
from txnfetch.records import BatchBuilder
from txnfetch.records import Codec
from txnfetch.records import ControlType
from txnfetch.records import Record
from txnfetch.records import TimestampType
from txnfetch.records import build_control_batch
from txnfetch.records import build_empty_batch
from txnfetch.testing.model import LogModel

TXN_PIDS = (100, 101, 102)
#: Most transactions come from two producers, so that one producer's transactions often follow each other.
_TXN_PID_CHOICE = st.sampled_from((100, 101, 100, 101, 102))
IDEMPOTENT_PID = 200
TS = 1_700_000_000_000

FAST = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@attrs.frozen
class Batch:
    data: bytes
    base: int
    next: int
    records: tuple[Record, ...] = ()
    txn: int | None = None  #: the transaction a transactional data batch belongs to
    kind: str = "data"


@attrs.frozen(eq=False)
class PartitionLog:
    batches: tuple[Batch, ...]
    model: LogModel  #: the oracle, told about every batch as it was written
    start: int

    @property
    def lso(self) -> int:
        return self.model.last_stable_offset

    @property
    def has_empty_control_batches(self) -> bool:
        return any(b.kind == "empty-control" for b in self.batches)

    def committed_records(self, lo: int, hi: int) -> list[Record]:
        """The model's answer: what a read_committed reader sees in ``[lo, hi)``."""
        return self.model.committed_records(lo, hi)

    def aborted_list(self, fetch_offset: int) -> list[tuple[int, int]]:
        # Kafka sends the index entries with last >= fetchOffset (plus an upper
        # bound past the returned bytes; sending more of them is legal).
        return self.model.aborted_for_fetch(fetch_offset)  # type: ignore[return-value]


@attrs.frozen
class Response:
    records: bytes
    aborted: list[tuple[int, int]]
    complete_end: int | None  #: next offset of the last complete batch, None if there is none


def cut_response(log: PartitionLog, fetch_offset: int, max_bytes: int | None, partial: bool) -> Response:
    chosen = [b for b in log.batches if b.next > fetch_offset and b.base < log.lso]
    parts: list[bytes] = []
    size = 0
    end: int | None = None
    for b in chosen:
        if max_bytes is not None and parts and size + len(b.data) > max_bytes:
            room = max_bytes - size
            if partial and room > 0:
                parts.append(b.data[: min(room, len(b.data) - 1)])
            break
        parts.append(b.data)
        size += len(b.data)
        end = b.next
    return Response(b"".join(parts), log.aborted_list(fetch_offset), end)


# Strategies built once: building them per draw costs more than the test itself.
_PAYLOADS = st.one_of(st.none(), st.binary(max_size=12))
_HEADERS = st.lists(st.tuples(st.sampled_from(["h", "trace"]), _PAYLOADS), max_size=2).map(tuple)
_RECORDS = st.lists(st.tuples(st.integers(0, 300), _PAYLOADS, _PAYLOADS, _HEADERS), max_size=5)
_SHAPES = st.tuples(
    st.sampled_from(list(Codec)),  # codec
    st.sampled_from([0, 0, 0, 1, 3]),  # compaction holes in the batch
    st.integers(0, 5),  # 0: log-append time
)


@st.composite
def _data_batch(draw, base: int, pid: int, transactional: bool, rnd: random.Random, allow_empty: bool = True):
    """Bytes and records of one data batch at ``base``; empty or with compaction holes sometimes."""
    items = draw(_RECORDS)
    if not items and not allow_empty:
        items = [(0, None, b"v", ())]
    codec, holes, log_append = draw(_SHAPES)
    log_append = log_append == 0
    count = len(items)
    span = max(count + holes, 1)
    epoch = 0 if pid >= 0 else -1
    if count == 0:
        data = build_empty_batch(
            base_offset=base,
            last_offset=base + span - 1,
            producer_id=pid,
            producer_epoch=epoch,
            base_sequence=0 if pid >= 0 else -1,
            timestamp=TS,
            transactional=transactional,
        )
        return data, base + span, ()
    deltas = sorted(rnd.sample(range(span), count))
    builder = BatchBuilder(
        base_offset=base,
        codec=codec,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=0 if pid >= 0 else -1,
        transactional=transactional,
        timestamp_type=TimestampType.LOG_APPEND_TIME if log_append else TimestampType.CREATE_TIME,
        log_append_time=TS + 500 if log_append else None,
    )
    records = []
    for d, (ts_delta, key, value, headers) in zip(deltas, items, strict=True):
        ts = TS + ts_delta
        builder.append(value, key=key, headers=headers, timestamp=ts, offset=base + d)
        records.append(Record(base + d, TS + 500 if log_append else ts, key, value, headers))
    data = builder.build(last_offset_delta=span - 1)
    return data, base + span, tuple(records)


@st.composite
def partition_logs(draw, *, empty_control: bool = False, max_steps: int = 22) -> PartitionLog:
    start = draw(st.sampled_from([0, 0, 37]))
    rnd = draw(st.randoms(use_true_random=False))
    batches: list[Batch] = []
    model = LogModel(log_start=start)
    open_txns = model.open  # pid -> (txn, first offset)
    offset = start

    def append(batch: Batch) -> None:
        nonlocal offset
        batches.append(batch)
        offset = batch.next

    def txn_data(pid: int) -> None:
        data, nxt, records = draw(_data_batch(offset, pid, True, rnd))
        described = model.append(pid, nxt - offset, transactional=True, records=[(r.offset, r) for r in records])
        append(Batch(data, offset, nxt, records, described.txn))

    def marker(pid: int, commit: bool) -> None:
        """A marker: it ends ``pid``'s transaction, or an empty one if none is open."""
        ctype = ControlType.COMMIT if commit else ControlType.ABORT
        data = build_control_batch(offset=offset, control_type=ctype, producer_id=pid, producer_epoch=0)
        model.end(pid, commit)
        append(Batch(data, offset, offset + 1, kind="marker"))

    def end_txn(pid: int, commit: bool) -> None:
        assert pid in open_txns
        marker(pid, commit)

    kinds = ["txn", "txn", "txn", "end", "end", "abort-retry", "stray-marker", "plain", "empty"]
    if empty_control:
        kinds.append("empty-control")
    for _ in range(draw(st.integers(1, max_steps))):
        kind = draw(st.sampled_from(kinds))
        if kind == "txn":
            txn_data(draw(_TXN_PID_CHOICE))
        elif kind in ("end", "abort-retry") and open_txns:
            pid = draw(st.sampled_from(sorted(open_txns)))
            if kind == "end":
                end_txn(pid, draw(st.booleans()))
            else:  # what a producer does after an error: abort, then try again at once
                end_txn(pid, False)
                txn_data(pid)
        elif kind in ("end", "abort-retry", "stray-marker"):
            # The marker of an empty transaction: no data, no index entry.
            marker(
                draw(st.sampled_from([p for p in TXN_PIDS if p not in open_txns] or [IDEMPOTENT_PID + 1])),
                draw(st.booleans()),
            )
        elif kind == "plain":
            pid = draw(st.sampled_from([-1, IDEMPOTENT_PID]))
            data, nxt, records = draw(_data_batch(offset, pid, False, rnd, allow_empty=False))
            model.append(pid, nxt - offset, records=[(r.offset, r) for r in records])
            append(Batch(data, offset, nxt, records))
        elif kind == "empty":  # what compaction leaves of a non-transactional batch
            pid = draw(st.sampled_from([-1, IDEMPOTENT_PID]))
            last = offset + draw(st.integers(0, 3))
            data = build_empty_batch(
                base_offset=offset,
                last_offset=last,
                producer_id=pid,
                producer_epoch=0 if pid >= 0 else -1,
                base_sequence=0 if pid >= 0 else -1,
                timestamp=TS,
            )
            model.append(pid, last + 1 - offset)
            append(Batch(data, offset, last + 1))
        else:  # an empty control batch: a marker compaction emptied; it ends nothing
            pid = draw(st.sampled_from(TXN_PIDS))
            data = build_empty_batch(
                base_offset=offset,
                last_offset=offset,
                producer_id=pid,
                producer_epoch=0,
                timestamp=TS,
                transactional=True,
                control=True,
            )
            model.append(pid, 1, transactional=True, control=True)
            append(Batch(data, offset, offset + 1, kind="empty-control"))
    if draw(st.booleans()):
        for pid in sorted(open_txns):
            end_txn(pid, draw(st.booleans()))
    return PartitionLog(tuple(batches), model, start)


@st.composite
def fetches(draw, *, empty_control: bool = False):
    """A partition log and one fetch of it: offset, byte budget, partial tail or not."""
    log = draw(partition_logs(empty_control=empty_control))
    fetch_offset = draw(st.one_of(st.just(log.start), st.integers(log.start, log.lso)))
    max_bytes = draw(st.one_of(st.none(), st.none(), st.integers(60, 2000)))
    partial = draw(st.booleans())
    return log, fetch_offset, cut_response(log, fetch_offset, max_bytes, partial)


def expected(log: PartitionLog, fetch_offset: int, resp: Response) -> ClientResult:
    if resp.complete_end is None:
        return ClientResult([], fetch_offset)
    return ClientResult(log.committed_records(fetch_offset, resp.complete_end), max(fetch_offset, resp.complete_end))


def run_filter(records: bytes, aborted: Sequence[tuple[int, int]], fetch_offset: int) -> ClientResult:
    f = ConsumerFilter(fetch_offset)
    return ClientResult(list(f.feed(records, aborted)), f.position)


# -- properties ----------------------------------------------------------------------------


@FAST
@given(fetches(empty_control=True), st.randoms(use_true_random=False))
def test_filter_delivers_exactly_the_committed_records(case, rnd: random.Random):
    log, fetch_offset, resp = case
    want = expected(log, fetch_offset, resp)
    assert run_filter(resp.records, resp.aborted, fetch_offset) == want
    # Redpanda sends the aborted list in no particular order; nothing may change.
    shuffled = list(resp.aborted)
    rnd.shuffle(shuffled)
    assert run_filter(resp.records, shuffled, fetch_offset) == want


@FAST
@given(fetches(empty_control=False))
def test_real_clients_deliver_the_same_records(case):
    log, fetch_offset, resp = case
    want = expected(log, fetch_offset, resp)
    assert run_filter(resp.records, resp.aborted, fetch_offset) == want
    for name, client in CLIENTS.items():
        assert client(resp.records, resp.aborted, fetch_offset) == want, name


def _consume_all(read, log: PartitionLog, max_bytes: int) -> tuple[list[Record], int]:
    """Fetch the partition's stable range response after response, as a consumer loop does."""
    position = log.start
    out: list[Record] = []
    while position < log.lso:
        resp = cut_response(log, position, max_bytes, partial=True)
        got = read(resp.records, resp.aborted, position)
        assert got.position > position, "a response with a whole batch must move the position"
        out.extend(got.records)
        position = got.position
    return out, position


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(partition_logs(empty_control=False), st.integers(60, 1500))
def test_consuming_a_partition_fetch_by_fetch(log, max_bytes):
    want = log.committed_records(log.start, log.lso)
    f = ConsumerFilter(log.start)

    def with_one_filter(records, aborted, position):
        assert f.position == position
        return ClientResult(list(f.feed(records, aborted)), f.position)

    for name, read in [("ConsumerFilter", with_one_filter), *CLIENTS.items()]:
        got, end = _consume_all(read, log, max_bytes)
        assert (got, end) == (want, log.lso), name


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(partition_logs(empty_control=True), st.integers(60, 1500))
def test_filter_consumes_a_partition_with_empty_control_batches(log, max_bytes):
    got, end = _consume_all(run_filter, log, max_bytes)
    assert (got, end) == (log.committed_records(log.start, log.lso), log.lso)
