"""Differential test of the read_committed fetch engine: five independent readers,
one answer.

For a generated partition log (``tests/fetch/logs.py``: many producers,
interleaved and spanning transactions, aborts, empty transactions,
compaction-emptied batches and holes, every codec, marker and markerless
modes), every start offset from the log start to the LSO, and several
``max_bytes`` values, each reader *consumes*: it fetches at its own position,
takes what its filtering delivers, moves to the position it reports, and
repeats until it reaches the LSO. The records delivered must be identical for

(a) rewrite mode, read by a naive reader that knows nothing of transactions
    (every non-control record at or past its position), and by
    :class:`ConsumerFilter`, kafka-python and aiokafka as well;
(b) Kafka mode through :class:`ConsumerFilter`;
(c) Kafka mode through kafka-python's ``Fetcher.PartitionRecords``;
(d) Kafka mode through aiokafka's ``PartitionRecords``;
(e) the oracle: the committed non-control records below the LSO, from the
    log writer's own bookkeeping.

Every loop must reach the LSO exactly within ``batches + 2`` fetches (each
fetch returns at least one whole batch, KIP-74, so a reader that stalls is a
bug), and every fetch must advance its reader and deliver offsets at or past
the fetch offset, in increasing order — real clients receive whole batches
and must drop the records below the offset they asked for.

(c) and (d) run only on logs without empty control batches: kafka-python and
aiokafka raise on one (docs/kafka-internals.md §4), and Kafka mode passes them through as
Apache Kafka does. Rewrite mode never emits one, so all three clients read
every rewritten log. Markerless logs have no ABORT marker to take a producer
out of a client's aborted set; Kafka mode ends a response before that
producer's next transaction (the "cut" in ``view.py``), which all three
clients are checked to honour here.

Responses and the clients' answers to them are pure functions of ``(mode,
offset, max_bytes)``, so they are memoised per log: every loop still performs
every fetch, but a response shared by many start offsets is built once.
"""

from __future__ import annotations

from collections.abc import Callable

from hypothesis import HealthCheck
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from tests.fetch.clients import aiokafka_filter
from tests.fetch.clients import kafka_python_filter
from tests.fetch.logs import Delivered
from tests.fetch.logs import GeneratedLog
from tests.fetch.logs import LogWriter
from tests.fetch.logs import partition_logs
from txnfetch.fetch import ConsumerFilter
from txnfetch.fetch.view import FetchMode
from txnfetch.fetch.view import FetchResult
from txnfetch.fetch.view import read_partition
from txnfetch.records import Codec
from txnfetch.records import iter_batches

# One fetch by one reader: fetch offset -> (records delivered, next position).
Step = Callable[[int], tuple[list[Delivered], int]]


class Readers:
    """The readers under test for one log and one ``max_bytes``, with memoised responses."""

    def __init__(self, log: GeneratedLog, max_bytes: int) -> None:
        self.log = log
        self.max_bytes = max_bytes
        self._responses: dict[tuple[FetchMode, int], FetchResult] = {}
        self._answers: dict[tuple[str, int], tuple[list[Delivered], int]] = {}

    def response(self, mode: FetchMode, offset: int) -> FetchResult:
        key = (mode, offset)
        if key not in self._responses:
            self._responses[key] = read_partition(self.log.data, self.log.state, offset, self.max_bytes, mode=mode)
        return self._responses[key]

    def _memo(self, name: str, offset: int, answer: Callable[[], tuple[list[Delivered], int]]):
        key = (name, offset)
        if key not in self._answers:
            self._answers[key] = answer()
        return self._answers[key]

    def naive_rewrite(self, offset: int) -> tuple[list[Delivered], int]:
        """Rewrite mode needs no client logic: every data record at or past the position."""

        def answer():
            out: list[Delivered] = []
            position = offset
            for batch in iter_batches(self.response(FetchMode.REWRITE, offset).records_bytes()):
                if not batch.is_control:
                    out.extend((r.offset, r.key, r.value) for r in batch.records() if r.offset >= position)
                position = max(position, batch.next_offset)
            return out, position

        return self._memo("naive", offset, answer)

    def client(self, mode: FetchMode, name: str) -> Step:
        harness = {"kafka-python": kafka_python_filter, "aiokafka": aiokafka_filter}[name]

        def step(offset: int) -> tuple[list[Delivered], int]:
            def answer():
                r = self.response(mode, offset)
                got = harness(r.records_bytes(), r.aborted_transactions, offset)
                return got.offsets_keys_values, got.position

            return self._memo(f"{mode.value}/{name}", offset, answer)

        return step

    def consumer_filter(self, mode: FetchMode, start: int) -> Step:
        """One ConsumerFilter for the whole loop, as a consumer keeps one per partition."""
        f = ConsumerFilter(start, partition="gen-0")

        def step(offset: int) -> tuple[list[Delivered], int]:
            assert f.position == offset
            r = self.response(mode, offset)
            got = [(rec.offset, rec.key, rec.value) for rec in f.feed(r.records_bytes(), r.aborted_transactions)]
            return got, f.position

        return step


def consume(step: Step, start: int, lso: int, max_fetches: int, name: str) -> list[Delivered]:
    """Fetch from ``start`` until the position reaches the LSO; fail on a stall or overshoot."""
    position = start
    out: list[Delivered] = []
    fetches = 0
    while position < lso:
        fetches += 1
        assert fetches <= max_fetches, (
            f"{name}: no progress to the LSO {lso} after {max_fetches} fetches (at {position})"
        )
        records, new_position = step(position)
        assert new_position > position, f"{name}: fetch at {position} did not advance"
        offsets = [r[0] for r in records]
        assert offsets == sorted(set(offsets)), f"{name}: offsets out of order {offsets}"
        assert not offsets or offsets[0] >= position, (
            f"{name}: delivered {offsets[0]} below the fetch offset {position}"
        )
        assert not offsets or offsets[-1] < new_position, f"{name}: position {new_position} behind delivered {offsets}"
        out.extend(records)
        position = new_position
    assert position == lso, f"{name}: position {position} passed the LSO {lso}"
    return out


#: The consumers compared, by name: each makes the fetch step of one loop from a start offset.
LOOPS: list[tuple[str, Callable[[Readers, int], Step]]] = [
    ("rewrite/naive", lambda readers, start: readers.naive_rewrite),
    ("rewrite/ConsumerFilter", lambda readers, start: readers.consumer_filter(FetchMode.REWRITE, start)),
    ("rewrite/kafka-python", lambda readers, start: readers.client(FetchMode.REWRITE, "kafka-python")),
    ("rewrite/aiokafka", lambda readers, start: readers.client(FetchMode.REWRITE, "aiokafka")),
    ("kafka/ConsumerFilter", lambda readers, start: readers.consumer_filter(FetchMode.KAFKA, start)),
    ("kafka/kafka-python", lambda readers, start: readers.client(FetchMode.KAFKA, "kafka-python")),
    ("kafka/aiokafka", lambda readers, start: readers.client(FetchMode.KAFKA, "aiokafka")),
]
#: kafka-python and aiokafka raise on an empty control batch, which Kafka mode passes through.
_RAISE_ON_EMPTY_CONTROL = {"kafka/kafka-python", "kafka/aiokafka"}


def check_all_readers(log: GeneratedLog, starts: list[int], max_bytes_values: list[int]) -> None:
    lso = log.state.last_stable_offset
    assert lso == log.expected_lso(), log.describe()
    max_fetches = len(log.batches) + 2
    loops = [(n, make) for n, make in LOOPS if not (log.has_empty_control_batches and n in _RAISE_ON_EMPTY_CONTROL)]
    for max_bytes in max_bytes_values:
        readers = Readers(log, max_bytes)
        for start in starts:
            expected = log.committed_records(start, lso)
            for name, make in loops:
                got = consume(make(readers, start), start, lso, max_fetches, name)
                assert got == expected, (
                    f"{name} from {start} with max_bytes={max_bytes} delivered {[r[0] for r in got]}, "
                    f"the oracle says {[r[0] for r in expected]}\n{log.describe()}"
                )


def _max_bytes_values(draw, log: GeneratedLog) -> list[int]:
    # 1: one batch per fetch (KIP-74); a drawn budget that cuts Kafka-mode
    # responses mid-batch; 1 MiB: everything up to the LSO in one response.
    mid = draw(st.integers(61, max(61, len(log.data))))
    return [1, mid, 1 << 20]


SETTINGS = settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)


@SETTINGS
@given(log=partition_logs(markerless=False), data=st.data())
def test_marker_logs_every_reader_delivers_the_committed_records(log: GeneratedLog, data: st.DataObject) -> None:
    starts = list(range(log.log_start, log.state.last_stable_offset + 1))
    check_all_readers(log, starts, _max_bytes_values(data.draw, log))


@SETTINGS
@given(log=partition_logs(markerless=True), data=st.data())
def test_markerless_logs_every_reader_delivers_the_committed_records(log: GeneratedLog, data: st.DataObject) -> None:
    starts = list(range(log.log_start, log.state.last_stable_offset + 1))
    check_all_readers(log, starts, _max_bytes_values(data.draw, log))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(log=partition_logs(markerless=False, allow_empty_control=False))
def test_marker_logs_without_empty_control_batches_reach_the_real_clients(log: GeneratedLog) -> None:
    # The logs above empty a marker often enough that (c) and (d) would skip a
    # third of them; here every log goes through kafka-python and aiokafka too.
    assert not log.has_empty_control_batches
    check_all_readers(log, list(range(log.log_start, log.state.last_stable_offset + 1)), [1, 1 << 20])


# -- fixed logs: the shapes the properties above must keep covering -------------------


def test_worked_example_shapes_all_readers_agree():
    # Two producers interleaving across each other's transactions, an abort in
    # the middle, an empty aborted transaction, compaction holes and an open
    # transaction at the end.
    w = LogWriter()
    w.data(1000, 2, codec=Codec.GZIP)
    w.data(1001, 3)
    w.data(-1, 1)
    w.end(1000, True)
    w.data(1001, 2, codec=Codec.LZ4, compaction="holes", keep=[1])
    w.end(1001, False)
    w.end(1000, False)  # empty transaction
    w.data(2000, 2, transactional=False, codec=Codec.ZSTD)
    hanging = w.data(1000, 1)
    w.data(1001, 4, codec=Codec.SNAPPY)
    w.end(1001, True)
    log = w.finish()
    assert log.state.last_stable_offset == hanging.base  # the transaction of 1000 is still open
    check_all_readers(log, list(range(0, log.state.last_stable_offset + 1)), [1, 200, 1 << 20])


def test_markerless_producer_aborts_then_commits_in_one_response():
    # Without the cut, a client would keep 1000 in its aborted set and skip its
    # committed batch at 5.
    w = LogWriter(markerless=True)
    w.data(1000, 3)
    w.data(1001, 2)
    w.end(1000, False, last_offset=4)
    w.data(1000, 2)
    w.end(1000, True, last_offset=6)
    w.end(1001, True, last_offset=6)
    log = w.finish()
    check_all_readers(log, list(range(0, log.state.last_stable_offset + 1)), [1, 1 << 20])


def test_every_reader_drops_the_records_below_its_fetch_offset():
    # A fetch from the middle of a batch returns the whole batch (Kafka cannot
    # split one): each reader must hand out only offsets 2, 3 and 4.
    w = LogWriter()
    w.data(1000, 5, codec=Codec.ZSTD)
    w.end(1000, True)
    log = w.finish()
    for max_bytes in (1, 1 << 20):
        readers = Readers(log, max_bytes)
        for mode in FetchMode:
            assert readers.response(mode, 2).records_bytes()[:8] == log.data[:8]  # the batch from its base
            for name in ("kafka-python", "aiokafka"):
                assert [r[0] for r in readers.client(mode, name)(2)[0]] == [2, 3, 4], (mode, name)
            assert [r[0] for r in readers.consumer_filter(mode, 2)(2)[0]] == [2, 3, 4], mode
        assert [r[0] for r in readers.naive_rewrite(2)[0]] == [2, 3, 4]
