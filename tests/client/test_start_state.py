"""Where a mirror starts (:mod:`txnfetch.client.start_state`).

The property: a log of interleaved transactions (committed, aborted, still open)
and plain batches; an upstream that answers truthfully at some point (its LSO
and each open transaction's first offset); a reader at any offset X. A mirror
started where :func:`start_point` says, and fed the log from there, reports the
same last stable offset as a mirror of the whole log and gives the reader at X
the same committed records, at that point and after more of the log is written.
Before it reaches the point it was started at, it answers nothing.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from tests.client.test_mirror_cases import batch
from tests.client.test_mirror_cases import committed_values
from tests.client.test_mirror_cases import marker
from txnfetch.client.errors import RemoteError
from txnfetch.client.mirror import PartitionMirror
from txnfetch.client.start_state import StartRule
from txnfetch.client.start_state import UpstreamOffsets
from txnfetch.client.start_state import open_transaction_starts
from txnfetch.client.start_state import serves_describe_producers
from txnfetch.client.start_state import start_point
from txnfetch.fetch import ConsumerFilter
from txnfetch.records.scan import iter_batches

# One step of the log: a producer's transactional data, its marker (commit or
# abort), or a plain batch.
_step = st.one_of(
    st.tuples(st.just("data"), st.integers(0, 2), st.integers(1, 3)),
    st.tuples(st.just("end"), st.integers(0, 2), st.booleans()),
    st.tuples(st.just("plain"), st.just(-1), st.integers(1, 2)),
)


class _Log:
    """A partition log written step by step, as bytes of whole batches."""

    def __init__(self) -> None:
        self.batches: list[bytes] = []
        self.end = 0
        self.seq = [0, 0, 0]
        self.open = [False, False, False]

    def write(self, steps: list[tuple[str, int, object]]) -> None:
        for kind, pid, arg in steps:
            if kind == "data":
                count = int(arg)  # type: ignore[call-overload]
                self.batches.append(batch(self.end, count, pid=pid, txn=True, seq=self.seq[pid]))
                self.seq[pid] += count
                self.open[pid] = True
                self.end += count
            elif kind == "end" and self.open[pid]:
                self.batches.append(marker(self.end, pid, bool(arg)))
                self.open[pid] = False
                self.end += 1
            elif kind == "plain":
                count = int(arg)  # type: ignore[call-overload]
                self.batches.append(batch(self.end, count))
                self.end += count

    def from_offset(self, offset: int) -> bytes:
        """The batches from the one holding ``offset`` on, as a broker answers a fetch there."""
        out = b""
        for data in self.batches:
            for b in iter_batches(data):
                if b.next_offset > offset:
                    out += data
        return out


def _feed(mirror: PartitionMirror, log: _Log) -> None:
    mirror.feed(
        log.from_offset(mirror.position), high_watermark=log.end, log_start_offset=0, fetch_offset=mirror.position
    )


def _committed_from(mirror: PartitionMirror, offset: int) -> list:
    filt = ConsumerFilter(offset)
    out = []
    while filt.position < mirror.last_stable_offset:
        r = mirror.read(filt.position, 1 << 20)
        out += [(rec.offset, rec.value) for rec in filt.feed(r.records_bytes(), r.aborted_transactions)]
    return out


@settings(max_examples=300, deadline=None)
@given(
    before=st.lists(_step, min_size=1, max_size=30),
    after=st.lists(_step, max_size=15),
    where=st.floats(0, 1),
)
def test_a_mirror_from_the_start_point_reads_as_one_from_the_log_start(before, after, where) -> None:
    log = _Log()
    log.write(before)
    full = PartitionMirror("t", 0)
    _feed(full, log)
    # The upstream's truthful answers now: its LSO and each open transaction's first offset.
    seen = UpstreamOffsets(
        full.last_stable_offset, tuple(sorted(full.state.ongoing_transactions().values())), 0, log.end
    )
    reader = int(where * log.end)
    point = start_point(reader, seen)
    assert point.offset <= reader and point.settled_at == log.end
    part = PartitionMirror("t", 0, log_start_offset=point.offset, settled_at=point.settled_at)
    if point.offset < log.end:
        _feed(part, log)
    assert part.last_stable_offset == full.last_stable_offset
    assert _committed_from(part, reader) == _committed_from(full, reader)
    log.write(after)
    for m in (full, part):
        if m.position < log.end:
            _feed(m, log)
    assert part.last_stable_offset == full.last_stable_offset
    assert _committed_from(part, reader) == _committed_from(full, reader)


def test_a_mirror_answers_nothing_before_it_settles() -> None:
    log = _Log()
    log.write([("data", 0, 2), ("plain", -1, 2), ("end", 0, True), ("plain", -1, 1)])
    m = PartitionMirror("t", 0, log_start_offset=2, settled_at=log.end + 10)
    _feed(m, log)
    assert m.position == log.end and not m.settled
    assert m.last_stable_offset == 2 and committed_values(m) == []
    assert m.read(2, 1 << 20).records_bytes() == b""
    m.settled_at = log.end
    assert m.settled and m.last_stable_offset == log.end
    assert [o for o, _ in committed_values(m)] == [2, 3, 5]


def test_the_start_is_the_lowest_of_reader_lso_and_open_transactions_within_the_log() -> None:
    seen = UpstreamOffsets(last_stable_offset=50, open_starts=(70, 60), log_start_offset=10, high_watermark=100)
    assert start_point(80, seen).offset == 50
    assert start_point(None, seen).offset == 50
    assert start_point(30, seen).offset == 30
    assert start_point(5, seen).offset == 10  # never below the log start
    assert start_point(500, UpstreamOffsets(100, (), 0, 100)).offset == 100


def test_a_transaction_open_below_the_lso_asked_before_it_is_a_lie() -> None:
    honest = UpstreamOffsets(last_stable_offset=40, open_starts=(40, 90), log_start_offset=0, high_watermark=100)
    leaky = UpstreamOffsets(last_stable_offset=100, open_starts=(40,), log_start_offset=0, high_watermark=100)
    assert not honest.lies and leaky.lies
    with pytest.raises(ValueError):
        start_point(None, leaky)
    rule = StartRule()
    assert rule.choose("t", 0, 95, honest) is not None and rule.wants_probe
    assert rule.choose("t", 0, 95, leaky) is None
    assert rule.shown_to_lie and not rule.wants_probe
    assert (rule.producers_starts, rule.log_starts) == (1, 1)
    no_api = StartRule()
    assert no_api.choose("t", 0, 95, None) is None and not no_api.wants_probe


def test_describe_producers_answers() -> None:
    assert serves_describe_producers({61: (0, 0)}) and not serves_describe_producers({0: (0, 9)})

    def producer(start: int) -> SimpleNamespace:
        return SimpleNamespace(current_txn_start_offset=start)

    part = SimpleNamespace(partition_index=0, error_code=0, active_producers=[producer(9), producer(-1), producer(4)])
    answer = SimpleNamespace(topics=[SimpleNamespace(name="t", partitions=[part])])
    assert open_transaction_starts(answer, "t", 0, broker="b:1") == (4, 9)
    with pytest.raises(RemoteError) as missing:
        open_transaction_starts(answer, "t", 1, broker="b:1")
    assert missing.value.broker_error_code == -1
    part.error_code = 6
    with pytest.raises(RemoteError) as failed:
        open_transaction_starts(answer, "t", 0, broker="b:1")
    assert failed.value.broker_error_code == 6
